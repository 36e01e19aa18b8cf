package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// denyReports installs a ValidatingAdmissionPolicy that refuses every
// write of the session's runtime identity: its report can no longer reach
// the API server, as when its RBAC is taken away for good (a RoleBinding
// alone would be put back by the controller). It returns the undo.
func denyReports(t *testing.T, ns, name string) func() {
	t.Helper()
	ctx := context.Background()
	id := "deny-" + ns + "-" + name
	if len(id) > 60 {
		id = id[:60]
	}
	user := fmt.Sprintf("system:serviceaccount:%s:lull-runtime-%s", ns, name)
	fail := admissionregistrationv1.Deny
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptrTo(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{lullv1.GroupVersion.Group}, APIVersions: []string{"*"}, Resources: []string{"sessions/status"}},
				},
			}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "runtime", Expression: fmt.Sprintf("request.userInfo.username == %q", user)}},
			Validations:     []admissionregistrationv1.Validation{{Expression: "false", Message: "e2e: this runtime's reports are refused"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: id, ValidationActions: []admissionregistrationv1.ValidationAction{fail}},
	}
	if err := c.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	undo := func() {
		_ = c.Delete(ctx, binding)
		_ = c.Delete(ctx, policy)
	}
	t.Cleanup(undo)
	// The policy takes effect once the API server's policy informer has it:
	// wait until a write as the runtime is refused.
	eventually(t, 20*time.Second, "the deny policy in force", func() error {
		// As the runtime's pod-bound token would be, so that lull's own
		// policy (a token must name its pod) lets the write through to
		// this one.
		p := pod(t, ns, name)
		if p == nil {
			return fmt.Errorf("no pod")
		}
		imp := *env.Cluster.Config
		imp.Impersonate.UserName = user
		// As the runtime's pod-bound token says it: lull's own policy
		// refuses a token that names no pod, and would answer first.
		if p := pod(t, ns, name); p != nil {
			imp.Impersonate.Extra = map[string][]string{
				"authentication.kubernetes.io/pod-name": {p.Name},
				"authentication.kubernetes.io/pod-uid":  {string(p.UID)},
			}
		}
		ic, err := client.New(&imp, client.Options{Scheme: c.Scheme()})
		if err != nil {
			return err
		}
		s := session(t, ns, name)
		err = ic.Status().Patch(ctx, s, client.RawPatch(types.MergePatchType, []byte(`{}`)), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "this runtime's reports are refused") {
			return fmt.Errorf("a write as the runtime: %v", err)
		}
		return nil
	})
	return undo
}

func ptrTo[T any](v T) *T { return &v }

// agent is a client of one pod's agent sidecar, over its socket.
type agent struct{ http *http.Client }

func agentOf(t *testing.T, uid types.UID) *agent {
	path := env.Runner.AgentSocket(uid)
	return &agent{http: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}}
}

func (a *agent) do(method, path string) (int, string, error) {
	req, err := http.NewRequest(method, "http://agent"+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(body), nil
}
