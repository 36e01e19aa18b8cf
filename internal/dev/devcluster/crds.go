package devcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"lull.dev/lull/config"
)

// crdFieldManager owns the fields InstallCRDs applies.
const crdFieldManager = "lull-dev"

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs applies every CustomResourceDefinition in config.CRDs
// (crd/bases/*.yaml) with server-side apply (field manager "lull-dev") and
// waits until each is Established and its resource is served.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("devcluster: install CRDs: %w", err)
	}
	crds, err := embeddedCRDs()
	if err != nil {
		return fmt.Errorf("devcluster: install CRDs: %w", err)
	}
	for _, crd := range crds {
		if _, err := client.Resource(crdGVR).Apply(ctx, crd.GetName(), crd, metav1.ApplyOptions{FieldManager: crdFieldManager, Force: true}); err != nil {
			return fmt.Errorf("devcluster: apply CRD %s: %w", crd.GetName(), err)
		}
	}
	for _, crd := range crds {
		if err := waitCRDServed(ctx, client, crd); err != nil {
			return fmt.Errorf("devcluster: CRD %s: %w", crd.GetName(), err)
		}
	}
	return nil
}

// embeddedCRDs decodes every YAML document of config.CRDs.
func embeddedCRDs() ([]*unstructured.Unstructured, error) {
	files, err := fs.Glob(config.CRDs, "crd/bases/*.yaml")
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("no CRDs embedded in lull.dev/lull/config")
	}
	var crds []*unstructured.Unstructured
	for _, name := range files {
		data, err := fs.ReadFile(config.CRDs, name)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			if obj.GetKind() != "CustomResourceDefinition" {
				return nil, fmt.Errorf("%s: unexpected kind %q", name, obj.GetKind())
			}
			crds = append(crds, obj)
		}
	}
	return crds, nil
}

// waitCRDServed waits until the CRD is Established and a list of its
// resources at the storage version succeeds, so clients can use it at once.
func waitCRDServed(ctx context.Context, client dynamic.Interface, crd *unstructured.Unstructured) error {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	var version string
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if storage, _ := m["storage"].(bool); storage {
			version, _ = m["name"].(string)
		}
	}
	gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: plural}
	return waitReady(ctx, nil, 30*time.Second, func(ctx context.Context) error {
		got, err := client.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		established := false
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				established = true
			}
		}
		if !established {
			return errors.New("not Established")
		}
		_, err = client.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	})
}
