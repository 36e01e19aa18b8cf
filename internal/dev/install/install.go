// Package install applies lull's embedded manifests (package config) to a
// cluster with server-side apply, the way `kubectl apply --server-side -k
// config/default` would: it is how `lull dev` and the tests install exactly
// what ships.
package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"lull.dev/lull/config"
	"lull.dev/lull/internal/dev/devcluster"
)

// FieldManager owns the fields Apply writes.
const FieldManager = "lull-install"

// Namespace is where the controller's ServiceAccount and Lease live.
const Namespace = "lull-system"

// All installs the CRDs (and waits until they are served), the controller's
// namespace and RBAC, and the runtime-status ValidatingAdmissionPolicy.
func All(ctx context.Context, cfg *rest.Config) error {
	if err := devcluster.InstallCRDs(ctx, cfg); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", Namespace, err)
	}
	for _, m := range []struct {
		fsys fs.FS
		glob string
	}{{config.RBAC, "rbac/*.yaml"}, {config.Admission, "admission/*.yaml"}} {
		if err := Apply(ctx, cfg, m.fsys, m.glob); err != nil {
			return err
		}
	}
	return nil
}

// Apply server-side applies every object in the YAML files of fsys matching
// glob (kustomization.yaml files are skipped), forcing ownership.
func Apply(ctx context.Context, cfg *rest.Config, fsys fs.FS, glob string) error {
	files, err := fs.Glob(fsys, glob)
	if err != nil {
		return err
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		if bytes.HasSuffix([]byte(f), []byte("kustomization.yaml")) {
			continue
		}
		o, err := decode(fsys, f)
		if err != nil {
			return err
		}
		objs = append(objs, o...)
	}
	return ApplyObjects(ctx, cfg, FieldManager, objs)
}

// ApplyObjects server-side applies objs in order as fieldManager, forcing
// ownership; an object of a namespaced kind goes to its namespace. The
// error names the kind and name of the object refused.
func ApplyObjects(ctx context.Context, cfg *rest.Config, fieldManager string, objs []*unstructured.Unstructured) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
		}
		ri := dynamic.ResourceInterface(dyn.Resource(m.Resource))
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if _, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, o.GetName(), err)
		}
	}
	return nil
}

func decode(fsys fs.FS, name string) ([]*unstructured.Unstructured, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, err
	}
	objs, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return objs, nil
}

// Decode splits a multi-document YAML (or JSON) stream into objects,
// dropping empty documents.
func Decode(manifest []byte) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}
