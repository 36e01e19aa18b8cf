// Package integration tests lull against a real kube-apiserver and etcd
// (controller-runtime envtest pointed at the binaries `make tools` builds):
// the CRDs' validation, the runtime's identity (RBAC and the
// ValidatingAdmissionPolicy, by impersonating a session's ServiceAccount),
// the Session controller against the real API, and the Go runtime SDK.
//
// One API server serves the whole package; every test works in namespaces
// of its own. There is no kube-controller-manager and no kubelet: the tests
// play the StatefulSet controller where one is needed.
package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/config"
	"lull.dev/lull/internal/dev/devcluster"
	"lull.dev/lull/internal/dev/install"
	"lull.dev/lull/internal/dev/testenv"
	"lull.dev/lull/internal/manager"
)

// Shared by every test of the package; set by TestMain.
var (
	// adminConfig reaches the API server as a cluster admin
	// (system:masters).
	adminConfig *rest.Config
	// admin is a client with adminConfig and lull's scheme.
	admin client.WithWatch
	// etcdURL is the client URL of the API server's etcd.
	etcdURL string
)

// logEnv, when set to 1, sends the controller's and client-go's logs to
// stderr; they are discarded otherwise.
const logEnv = "LULL_INTEGRATION_LOG"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if os.Getenv(logEnv) == "1" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	} else {
		ctrl.SetLogger(logr.Discard())
		klog.SetOutput(io.Discard)
		klog.LogToStderr(false)
	}

	assets, err := devcluster.EnvtestAssets()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: integration tests need kube-apiserver and etcd; run `make tools` to build them: %v\n", err)
		return 1
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		UseExistingCluster:    ptr.To(false),
	}
	start := time.Now()
	adminConfig, err = env.Start()
	if err != nil {
		// Start leaves the API server and etcd running when a later step
		// (installing the CRDs) fails.
		_ = env.Stop()
		fmt.Fprintf(os.Stderr, "FAIL: start envtest (kube-apiserver and etcd from %s; run `make tools` if they are missing or broken): %v\n", assets, err)
		return 1
	}
	etcdURL = env.ControlPlane.Etcd.URL.String()
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "integration: stop envtest: %v\n", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := install.Apply(ctx, adminConfig, config.Admission, "admission/*.yaml"); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: install the admission policy: %v\n", err)
		return 1
	}
	if admin, err = client.NewWithWatch(adminConfig, client.Options{Scheme: manager.Scheme()}); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: admin client: %v\n", err)
		return 1
	}
	fmt.Printf("integration: envtest up in %s (assets %s)\n", time.Since(start).Round(time.Millisecond), assets)
	defer func() { stopManager() }() // before the API server stops
	return m.Run()
}

// eventually is testenv.EventuallyContext: cond gets a context that ends
// with the wait.
var eventually = testenv.EventuallyContext

// consistently checks cond every 100ms for d and fails the test the first
// time it returns an error.
func consistently(t *testing.T, d time.Duration, what string, cond func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := cond(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func poll(ctx context.Context, timeout time.Duration, cond func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = cond(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %s: %w", timeout, last)
		case <-tick.C:
		}
	}
}

// newNamespace creates a namespace named after prefix, unique in the run.
// Without a namespace controller it is never emptied, so it is left behind:
// the API server goes away with the package.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := admin.Create(t.Context(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

// newSession returns an unsaved Session of template tpl.
func newSession(ns, name, tpl string) *lullv1.Session {
	return &lullv1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: tpl}},
	}
}

// newTemplate returns an unsaved SessionTemplate running image.
func newTemplate(ns, name, image string) *lullv1.SessionTemplate {
	return &lullv1.SessionTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: image}}}}},
	}
}

// createIdentity creates, as admin, a session's runtime ServiceAccount, Role
// and RoleBinding exactly as the session controller renders them.
func createIdentity(t *testing.T, s *lullv1.Session) {
	t.Helper()
	for _, o := range []client.Object{render.ServiceAccount(s), render.Role(s), render.RoleBinding(s)} {
		if err := admin.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

// runtimeUser is the user name of a session's runtime ServiceAccount.
func runtimeUser(ns, sessionName string) string {
	return "system:serviceaccount:" + ns + ":" + lullv1.RuntimeIdentityName(sessionName)
}

// runtimeConfig reaches the API server as a session's runtime: the admin
// impersonates its ServiceAccount, with the groups a ServiceAccount token
// authenticates with.
func runtimeConfig(ns, sessionName string) *rest.Config {
	cfg := rest.CopyConfig(adminConfig)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: runtimeUser(ns, sessionName),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	return cfg
}

// runtimeClient is a client acting as a session's runtime.
func runtimeClient(t *testing.T, ns, sessionName string) client.WithWatch {
	t.Helper()
	c, err := client.NewWithWatch(runtimeConfig(ns, sessionName), client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatalf("runtime client: %v", err)
	}
	return c
}

// getSession reads a session as admin.
func getSession(ctx context.Context, ns, name string) (*lullv1.Session, error) {
	s := &lullv1.Session{}
	err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s)
	return s, err
}

// mustGetSession reads a session as admin and fails the test on error.
func mustGetSession(t *testing.T, ns, name string) *lullv1.Session {
	t.Helper()
	s, err := getSession(t.Context(), ns, name)
	if err != nil {
		t.Fatalf("get session %s/%s: %v", ns, name, err)
	}
	return s
}

// sessionRef is an empty Session naming ns/name, the target of a patch.
func sessionRef(ns, name string) *lullv1.Session {
	return &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// mergePatch is a JSON merge patch (RFC 7386).
func mergePatch(body string) client.Patch {
	return client.RawPatch(types.MergePatchType, []byte(body))
}

// wantForbidden fails the test unless err is a 403 Forbidden.
func wantForbidden(t *testing.T, what string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: allowed, want 403 Forbidden", what)
	case !apierrors.IsForbidden(err):
		t.Errorf("%s: got %v (reason %s), want 403 Forbidden", what, err, apierrors.ReasonForError(err))
	}
}

// errContains reports whether err is non-nil and its message holds every
// one of parts.
func errContains(err error, parts ...string) bool {
	if err == nil {
		return false
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			return false
		}
	}
	return true
}

// errUnexpectedSuccess marks a write that a poll expected to be refused.
var errUnexpectedSuccess = errors.New("write was allowed")
