package runtimesdk

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// fieldManager names the runtime in the Session's managedFields.
const fieldManager = "lull-runtime"

// sessionAPI is all of the Kubernetes API a runtime uses, and all its Role
// allows: get and watch its own Session, patch its own sessions/status.
type sessionAPI interface {
	// Get reads the Session.
	Get(ctx context.Context) (*lullv1.Session, error)
	// Watch watches the Session from resourceVersion ("" for its current
	// state, sent first), with bookmarks, for timeout at most.
	Watch(ctx context.Context, resourceVersion string, timeout time.Duration) (watch.Interface, error)
	// PatchStatus sends a JSON merge patch to sessions/status and returns
	// the Session's resourceVersion after it. A non-empty resourceVersion
	// is a precondition: the API server answers Conflict if the Session has
	// changed since that version.
	PatchStatus(ctx context.Context, patch []byte, resourceVersion string) (string, error)
}

// kubeSession is the sessionAPI of one Session on an API server.
type kubeSession struct {
	c   client.WithWatch
	key types.NamespacedName
}

// newKubeClient returns a client that knows only lull's types and maps
// Session to its resource without discovery: the runtime's identity may
// read nothing but its own Session.
func newKubeClient(cfg *rest.Config) (client.WithWatch, error) {
	scheme := kruntime.NewScheme()
	if err := lullv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{lullv1.GroupVersion})
	mapper.Add(lullv1.GroupVersion.WithKind("Session"), meta.RESTScopeNamespace)
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = fieldManager
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme, Mapper: mapper, FieldOwner: fieldManager})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, nil
}

func (k *kubeSession) Get(ctx context.Context) (*lullv1.Session, error) {
	var s lullv1.Session
	if err := k.c.Get(ctx, k.key, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Watch watches the one Session through a field selector on its name, the
// form of watch a Role limited by resourceNames allows. It asks for
// bookmarks, so the runtime learns the current resourceVersion while its
// Session does not change and resumes from there when the watch ends, and
// asks the server to end the watch after timeout (whole seconds), so a
// connection that died silently is replaced.
func (k *kubeSession) Watch(ctx context.Context, resourceVersion string, timeout time.Duration) (watch.Interface, error) {
	seconds := int64(timeout / time.Second)
	return k.c.Watch(ctx, &lullv1.SessionList{},
		client.InNamespace(k.key.Namespace),
		client.MatchingFields{"metadata.name": k.key.Name},
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resourceVersion, TimeoutSeconds: &seconds, AllowWatchBookmarks: true}},
	)
}

func (k *kubeSession) PatchStatus(ctx context.Context, patch []byte, resourceVersion string) (string, error) {
	if resourceVersion != "" {
		var body map[string]json.RawMessage
		if err := json.Unmarshal(patch, &body); err != nil {
			return "", err
		}
		meta, err := json.Marshal(map[string]string{"resourceVersion": resourceVersion})
		if err != nil {
			return "", err
		}
		body["metadata"] = meta
		if patch, err = json.Marshal(body); err != nil {
			return "", err
		}
	}
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: k.key.Name, Namespace: k.key.Namespace}}
	if err := k.c.Status().Patch(ctx, s, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return "", err
	}
	return s.ResourceVersion, nil
}
