// Package chart renders lull's Helm chart, charts/lull, with Helm's own Go
// packages (no helm binary), for the tests that hold the chart to what
// config/ ships: lint and render here, server-side apply and a controller
// running with the chart's RBAC in test/integration.
package chart

import (
	"cmp"
	"fmt"
	"path/filepath"
	"runtime"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"lull.dev/lull/internal/dev/install"
)

// Dir returns the absolute path of charts/lull in this source tree. The
// chart is read from the tree, not embedded, so a test sees the files as
// they are committed.
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("chart: no caller information to find charts/lull from")
	}
	// file is <root>/internal/dev/chart/chart.go.
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "charts", "lull")
}

// Options of Render. The zero value renders release "lull" in namespace
// lull-system with the chart's default values, for Kubernetes
// MinKubeVersion.
type Options struct {
	// Dir is the chart's directory; empty means Dir().
	Dir string
	// Release and Namespace name the release; "lull" and "lull-system"
	// when empty.
	Release, Namespace string
	// Values are merged over the chart's values.yaml, as `helm install
	// --values` merges them.
	Values map[string]any
	// KubeVersion is the cluster's version the chart is rendered for
	// ("v1.30.0"); empty means MinKubeVersion. (Helm's own default for a
	// client-only render is its build's, v1.20 here, which the chart
	// refuses.)
	KubeVersion string
}

// MinKubeVersion is the oldest Kubernetes the chart supports (Chart.yaml
// kubeVersion): native sidecars are 1.29, ValidatingAdmissionPolicy v1
// 1.30.
const MinKubeVersion = "v1.30.0"

// Render renders the chart as `helm install --dry-run=client
// --include-crds` does and returns its objects in Helm's install order:
// the CRDs (crds/) first, then the templates sorted by kind. Values the
// chart's values.schema.json refuses, a template that fails, or a
// kubeVersion the chart does not support are errors.
func Render(opts Options) ([]*unstructured.Unstructured, error) {
	dir := cmp.Or(opts.Dir, Dir())
	chrt, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	install := action.NewInstall(&action.Configuration{})
	install.ReleaseName = cmp.Or(opts.Release, "lull")
	install.Namespace = cmp.Or(opts.Namespace, "lull-system")
	install.DryRun, install.DryRunOption, install.ClientOnly = true, "client", true
	install.IncludeCRDs = true
	install.Replace = true // no release store to check names against
	kv, err := chartutil.ParseKubeVersion(cmp.Or(opts.KubeVersion, MinKubeVersion))
	if err != nil {
		return nil, fmt.Errorf("kube version %q: %w", opts.KubeVersion, err)
	}
	install.KubeVersion = kv
	values := opts.Values
	if values == nil {
		values = map[string]any{}
	}
	rel, err := install.Run(chrt, values)
	if err != nil {
		return nil, err
	}
	return Decode([]byte(rel.Manifest))
}

// Decode splits a multi-document YAML stream into objects, dropping empty
// documents.
func Decode(manifest []byte) ([]*unstructured.Unstructured, error) {
	objs, err := install.Decode(manifest)
	if err != nil {
		return nil, fmt.Errorf("decode rendered manifest: %w", err)
	}
	return objs, nil
}
