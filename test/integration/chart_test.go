package integration

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/config"
	"lull.dev/lull/internal/dev/chart"
	"lull.dev/lull/internal/dev/install"
)

// chartFieldManager owns what TestChartInstallsAWorkingController applies.
const chartFieldManager = "helm-test"

// leaseName is the controller's leader-election Lease
// (internal/manager's LeaderElectionID).
const leaseName = "lull-controller.lull.dev"

// TestChartInstallsAWorkingController installs what charts/lull renders
// (server-side apply of every object, CRDs included) and runs the
// production binary, lull-controller, as a host process with the chart's
// Deployment arguments and a token of the chart's ServiceAccount: the
// chart's RBAC must be enough for it to win its Lease and bring a Session
// to Running, Ready and UpToDate, with no request refused; and the
// ClusterRole on the API server must be, rule for rule, the one
// controller-gen generates (config/rbac/role.yaml), no wider.
func TestChartInstallsAWorkingController(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := newNamespace(t, "lull-chart")

	dc, err := discovery.NewDiscoveryClientForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	version, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	// Release lull-chart, so its cluster-wide objects (lull-chart-controller)
	// are its own; watchNamespace, so the controller leaves the other
	// tests' sessions alone.
	objs, err := chart.Render(chart.Options{Release: "lull-chart", Namespace: ns, KubeVersion: version.GitVersion,
		Values: map[string]any{"watchNamespace": ns}})
	if err != nil {
		t.Fatalf("render the chart for Kubernetes %s: %v", version.GitVersion, err)
	}

	if err := install.ApplyObjects(ctx, adminConfig, chartFieldManager, objs); err != nil {
		t.Fatalf("server-side apply the rendered chart: %v", err)
	}
	var (
		deployment   appsv1.Deployment
		sa, roleName string
	)
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			b, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, &deployment); err != nil {
				t.Fatal(err)
			}
		case "ServiceAccount":
			sa = o.GetName()
		case "ClusterRole":
			roleName = o.GetName()
		}
	}
	if sa == "" || roleName == "" || len(deployment.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("the chart rendered ServiceAccount %q, ClusterRole %q and a Deployment of %d containers; want all three, one container",
			sa, roleName, len(deployment.Spec.Template.Spec.Containers))
	}

	t.Run("ClusterRole is the generated one, no wider", func(t *testing.T) {
		b, err := fs.ReadFile(config.RBAC, "rbac/role.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var generated rbacv1.ClusterRole
		if err := yaml.Unmarshal(b, &generated); err != nil {
			t.Fatal(err)
		}
		applied, err := kubernetes.NewForConfigOrDie(adminConfig).RbacV1().ClusterRoles().Get(ctx, roleName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(applied.Rules) != len(generated.Rules) {
			t.Errorf("ClusterRole %s has %d rules on the API server, config/rbac/role.yaml %d", roleName, len(applied.Rules), len(generated.Rules))
		}
		for i := range max(len(applied.Rules), len(generated.Rules)) {
			var a, g *rbacv1.PolicyRule
			if i < len(applied.Rules) {
				a = &applied.Rules[i]
			}
			if i < len(generated.Rules) {
				g = &generated.Rules[i]
			}
			if !equality.Semantic.DeepEqual(a, g) {
				t.Errorf("rule %d: the API server has %+v, config/rbac/role.yaml %+v", i, a, g)
			}
		}
	})

	kubeconfig := serviceAccountKubeconfig(t, ns, sa)
	bin := buildController(t)
	healthAddr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	// The chart's arguments as the pod would run them, then what differs
	// on a host: where the API server is and where to listen.
	args := append(deployment.Spec.Template.Spec.Containers[0].Args,
		"--kubeconfig="+kubeconfig, "--health-probe-bind-address="+healthAddr, "--metrics-bind-address="+metricsAddr)
	runController(t, bin, args)

	waitControllerReady(t, "http://"+healthAddr+"/readyz")
	t.Run("acquires its Lease in the release namespace", func(t *testing.T) {
		eventually(t, 30*time.Second, "the controller holds Lease "+leaseName, func(ctx context.Context) error {
			l := &coordinationv1.Lease{}
			if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: leaseName}, l); err != nil {
				return err
			}
			if ptr.Deref(l.Spec.HolderIdentity, "") == "" {
				return fmt.Errorf("Lease %s/%s has no holder", ns, leaseName)
			}
			return nil
		})
	})

	t.Run("brings a Session to Running and up to date", func(t *testing.T) {
		tpl := newTemplate(ns, "tpl", "example.com/runtime:v1")
		if err := admin.Create(ctx, tpl); err != nil {
			t.Fatal(err)
		}
		s := newSession(ns, "s", tpl.Name)
		if err := admin.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		sts := &appsv1.StatefulSet{}
		eventually(t, 30*time.Second, "the controller creates the session's StatefulSet", func(ctx context.Context) error {
			return admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.Name}, sts)
		})
		// Play the StatefulSet controller and the kubelet, which envtest
		// lacks.
		pod := createPod(t, sts, "rev-1")
		setRevisions(t, ns, s.Name, "rev-1", "rev-1")
		waitStatus(t, ns, s.Name, "the session is Running, Ready and UpToDate on its pod", func(st lullv1.SessionStatus) bool {
			return st.Phase == lullv1.SessionRunning && st.PodUID == pod.UID &&
				meta.IsStatusConditionTrue(st.Conditions, lullv1.ConditionReady) &&
				meta.IsStatusConditionTrue(st.Conditions, lullv1.ConditionUpToDate)
		})
	})

	t.Run("no request refused", func(t *testing.T) {
		// The controller counts its own requests by status code
		// (client-go's rest_client_requests_total, lull's
		// lull_controller_api_requests_total); a refused one is a 403 in
		// either. (A refused write becomes a Session condition, not a log
		// line, so the log would not tell.)
		counted, refused := requestCodes(t, "http://"+metricsAddr+"/metrics", "403")
		if counted == 0 {
			t.Fatal("no request counted by status code on /metrics: nothing to judge the RBAC by")
		}
		for _, r := range refused {
			t.Errorf("the API server refused the chart's ServiceAccount: %s", r)
		}
	})
}

// requestCodes reads the Prometheus text at url and returns how many
// samples carry a code label, and those whose code is refused.
func requestCodes(t *testing.T, url, refusedCode string) (counted int, refused []string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "code" {
					continue
				}
				counted++
				if l.GetValue() == refusedCode {
					refused = append(refused, fmt.Sprintf("%s%v", name, m.GetLabel()))
				}
			}
		}
	}
	return counted, refused
}

// serviceAccountKubeconfig mints a token of ServiceAccount ns/sa through
// the TokenRequest API (as the kubelet does for a pod) and writes a
// kubeconfig that reaches the API server with it.
func serviceAccountKubeconfig(t *testing.T, ns, sa string) string {
	t.Helper()
	tr, err := kubernetes.NewForConfigOrDie(adminConfig).CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of ServiceAccount %s/%s: %v", ns, sa, err)
	}
	// The same API server and CA as the admin's, with the token alone.
	cfg := &rest.Config{Host: adminConfig.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: adminConfig.CAData}}
	// The token authenticates, and the RBAC just applied has reached the
	// API server's authorizer.
	eventually(t, 10*time.Second, fmt.Sprintf("list pods as %s/%s", ns, sa), func(ctx context.Context) error {
		_, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	})
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: sa, Namespace: ns}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), sa+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// buildController builds cmd/lull-controller, the production binary.
func buildController(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lull-controller")
	build := exec.Command("go", "build", "-o", bin, "lull.dev/lull/cmd/lull-controller")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build lull-controller: %v\n%s", err, out)
	}
	return bin
}

// runController runs bin with args until the test ends; its log (stdout
// and stderr) is printed when the test fails.
func runController(t *testing.T, bin string, args []string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "controller.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("lull-controller %s:\n%s", strings.Join(args, " "), b)
		}
	})
}

// waitControllerReady waits until url (the controller's /readyz) answers
// 200.
func waitControllerReady(t *testing.T, url string) {
	t.Helper()
	eventually(t, 60*time.Second, "controller ready at "+url, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}
