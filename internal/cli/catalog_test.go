package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog/catalogtest"
	"lull.dev/lull/internal/dev/scenario"
	"lull.dev/lull/internal/manager"
)

func catalogClient(objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(manager.Scheme()).WithObjects(objs...).Build()
}

func TestWriteCatalogWithoutCatalog(t *testing.T) {
	var out bytes.Buffer
	if err := WriteCatalog(t.Context(), &out, catalogClient()); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "no RuntimeCatalog \"default\": every image is allowed\n" {
		t.Errorf("output %q", got)
	}
}

func TestWriteCatalogListsEveryEntry(t *testing.T) {
	var out bytes.Buffer
	if err := WriteCatalog(t.Context(), &out, catalogClient(catalogtest.Catalog())); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2+len(catalogtest.Catalog().Spec.Images) {
		t.Fatalf("want a header and one line per entry:\n%s", out.String())
	}
	for _, want := range [][]string{
		{"REPOSITORY", "TAGS", "DIGESTS", "NAMESPACES"},
		{"registry.example.com/agent-runtime", "v1,v2", catalogtest.ListedDigest, "*"},
		{"registry.example.com/scoped", "v1", "-", catalogtest.NamespaceA},
		{"nginx", "-", catalogtest.OtherListedDigest, "*"},
	} {
		found := false
		for _, l := range lines {
			if strings.Join(strings.Fields(l), " ") == strings.Join(want, " ") {
				found = true
			}
		}
		if !found {
			t.Errorf("no line %q in:\n%s", strings.Join(want, " "), out.String())
		}
	}
}

func TestCheckImagePrintsVerdictAndReason(t *testing.T) {
	c := catalogClient(catalogtest.Catalog())
	for _, tc := range []struct {
		image, ns string
		ok        bool
		want      string
	}{
		{"registry.example.com/agent-runtime:v1", catalogtest.NamespaceB, true, "allowed: registry.example.com/agent-runtime:v1 in namespace lull-catalog-b: tag v1 of registry.example.com/agent-runtime is in RuntimeCatalog \"default\"\n"},
		{"registry.example.com/scoped:v1", catalogtest.NamespaceB, false, "refused: registry.example.com/scoped:v1 in namespace lull-catalog-b: repository registry.example.com/scoped is in RuntimeCatalog \"default\", but not for namespace lull-catalog-b\n"},
	} {
		var out bytes.Buffer
		ok, err := CheckImage(t.Context(), &out, c, tc.ns, tc.image)
		if err != nil {
			t.Fatal(err)
		}
		if ok != tc.ok || out.String() != tc.want {
			t.Errorf("CheckImage(%s) = %v, %q; want %v, %q", tc.image, ok, out.String(), tc.ok, tc.want)
		}
	}
}

func TestWriteTemplatesJudgesEachTemplate(t *testing.T) {
	tpl := func(name, image string) *lullv1.SessionTemplate {
		return &lullv1.SessionTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: catalogtest.NamespaceA, Name: name},
			Spec:       lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: image}}}}},
			Status:     lullv1.SessionTemplateStatus{Conditions: []metav1.Condition{{Type: lullv1.ConditionImageAllowed, Status: metav1.ConditionFalse, Reason: lullv1.ReasonImageNotAllowed}}},
		}
	}
	c := catalogClient(catalogtest.Catalog(), tpl("good", "registry.example.com/agent-runtime:v2"), tpl("gone", "registry.example.com/agent-runtime:v0"))
	var out bytes.Buffer
	if err := writeTemplates(t.Context(), &out, c, catalogtest.NamespaceA); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"good registry.example.com/agent-runtime:v2 allowed", "gone registry.example.com/agent-runtime:v0 refused False (ImageNotAllowed)"} {
		if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// `lull catalog check` exits 1 for a refused image and 2 when it could not
// judge, so a script can tell a refusal from a broken kubeconfig; any other
// command's error exits 1.
func TestCatalogCheckExitCodes(t *testing.T) {
	if got := ExitCode(nil); got != 0 {
		t.Errorf("ExitCode(nil) = %d, want 0", got)
	}
	if got := ExitCode(errRefused); got != 1 {
		t.Errorf("a refused image exits %d, want 1", got)
	}
	if got := ExitCode(fmt.Errorf("wrapped: %w", ExitError{Code: 2, Err: errors.New("no cluster")})); got != 2 {
		t.Errorf("an error judging exits %d, want 2", got)
	}
	if got := ExitCode(errors.New("anything else")); got != 1 {
		t.Errorf("another error exits %d, want 1", got)
	}

	cmd := NewRoot("kubectl-lull")
	cmd.SetArgs([]string{"catalog", "check", "example.com/x:v1", "--kubeconfig", filepath.Join(t.TempDir(), "missing")})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if got := ExitCode(cmd.Execute()); got != 2 {
		t.Errorf("check with a missing kubeconfig exits %d, want 2", got)
	}
}

// A break-glass on a template whose runtime image the catalog refuses says
// that nothing will move; one whose image is listed, or with no catalog,
// says nothing more.
func TestForceWarnsWhenTheCatalogHoldsTheTemplate(t *testing.T) {
	refused := scenario.Template("team-b", "agent", "registry.example.com/agent-runtime:v9")
	if got := catalogHold(t.Context(), catalogClient(catalogtest.Catalog()), refused); !strings.Contains(got, "no session moves until the catalog lists the image") || !strings.Contains(got, "v9") {
		t.Errorf("catalogHold of a refused image = %q", got)
	}
	listed := scenario.Template("team-b", "agent", "registry.example.com/agent-runtime:v2")
	if got := catalogHold(t.Context(), catalogClient(catalogtest.Catalog()), listed); got != "" {
		t.Errorf("catalogHold of a listed image = %q, want none", got)
	}
	if got := catalogHold(t.Context(), catalogClient(), refused); got != "" {
		t.Errorf("catalogHold without a catalog = %q, want none", got)
	}
}
