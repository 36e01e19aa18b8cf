package devstorage

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
)

// Event reasons, as the external provisioner library records them.
const (
	// ReasonProvisioningFailed (Warning, on the claim): the claim asks for
	// something the provisioner cannot give, or creating its volume failed.
	ReasonProvisioningFailed = "ProvisioningFailed"
	// ReasonProvisioningSucceeded (Normal, on the claim): its volume exists.
	ReasonProvisioningSucceeded = "ProvisioningSucceeded"
	// ReasonVolumeFailedDelete (Warning, on the volume): removing a
	// released volume failed; it is retried.
	ReasonVolumeFailedDelete = "VolumeFailedDelete"
)

// Options configure a ProvisionController.
type Options struct {
	// Config is an admin client config.
	Config *rest.Config
	// Dir holds one directory per volume, named after the volume; created.
	Dir string
	// Log receives one line per volume provisioned or deleted and per
	// failure; may be nil.
	Log io.Writer
}

// ProvisionController provisions the volumes of lull-dev claims and deletes
// them once released (the external provisioner library's
// ProvisionController, for one kind of volume).
type ProvisionController struct {
	opts     Options
	client   kubernetes.Interface
	recorder events.EventRecorder

	claims  corelisters.PersistentVolumeClaimLister
	volumes corelisters.PersistentVolumeLister
	// Keys of claims (namespace/name) and names of volumes to look at;
	// a failed attempt is retried with a per-item back-off.
	claimQueue, volumeQueue workqueue.TypedRateLimitingInterface[string]
}

// New returns a provision controller; Run starts it.
func New(opts Options) (*ProvisionController, error) {
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	opts.Dir = dir
	client, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return nil, err
	}
	return newProvisionController(opts, client), nil
}

// newProvisionController wants opts.Dir absolute and existing.
func newProvisionController(opts Options, client kubernetes.Interface) *ProvisionController {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	queue := func(name string) workqueue.TypedRateLimitingInterface[string] {
		return workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
	}
	return &ProvisionController{opts: opts, client: client, claimQueue: queue("claims"), volumeQueue: queue("volumes")}
}

// Run watches claims and volumes until ctx is done. It runs once.
func (c *ProvisionController) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(c.client, 0)
	claims, volumes := factory.Core().V1().PersistentVolumeClaims(), factory.Core().V1().PersistentVolumes()
	c.claims, c.volumes = claims.Lister(), volumes.Lister()
	enqueue := func(q workqueue.TypedInterface[string]) cache.ResourceEventHandler {
		add := func(o any) {
			if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
				q.Add(key)
			}
		}
		return cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, o any) { add(o) }}
	}
	if _, err := claims.Informer().AddEventHandler(enqueue(c.claimQueue)); err != nil {
		return err
	}
	if _, err := volumes.Informer().AddEventHandler(enqueue(c.volumeQueue)); err != nil {
		return err
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: c.client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()
	c.recorder = broadcaster.NewRecorder(scheme.Scheme, Provisioner)

	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), claims.Informer().HasSynced, volumes.Informer().HasSynced) {
		return ctx.Err()
	}
	var wg sync.WaitGroup
	wg.Go(func() { work(ctx, c.claimQueue, c.syncClaim) })
	wg.Go(func() { work(ctx, c.volumeQueue, c.syncVolume) })
	<-ctx.Done()
	c.claimQueue.ShutDown()
	c.volumeQueue.ShutDown()
	wg.Wait()
	return nil
}

// work syncs the keys of q until q shuts down; a key whose sync fails is
// retried after its back-off.
func work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) error) {
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		if err := sync(ctx, key); err != nil && ctx.Err() == nil {
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

// syncClaim provisions the volume of a served claim: its directory, then
// the volume pre-bound to it. A claim the provisioner must refuse gets a
// Warning Event and no retry; it is looked at again when it changes.
func (c *ProvisionController) syncClaim(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	claim, err := c.claims.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && !served(claim)) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := refusal(claim); err != nil {
		c.recorder.Eventf(claim, nil, corev1.EventTypeWarning, ReasonProvisioningFailed, "Provisioning", "cannot provision a volume of class %s: %v", StorageClassName, err)
		c.logf("claim %s: refused: %v\n", key, err)
		return nil
	}
	pv := volumeFor(claim, c.opts.Dir)
	if _, err := c.volumes.Get(pv.Name); err == nil {
		return nil // created before; the PV controller is binding it
	}
	if err := c.provision(ctx, pv); err != nil {
		c.recorder.Eventf(claim, nil, corev1.EventTypeWarning, ReasonProvisioningFailed, "Provisioning", "volume %s: %v; retrying", pv.Name, err)
		c.logf("claim %s: provision volume %s: %v\n", key, pv.Name, err)
		return err
	}
	size := pv.Spec.Capacity[corev1.ResourceStorage]
	c.recorder.Eventf(claim, nil, corev1.EventTypeNormal, ReasonProvisioningSucceeded, "Provisioning", "Successfully provisioned volume %s", pv.Name)
	c.logf("claim %s: provisioned volume %s (%s) at %s\n", key, pv.Name, size.String(), pv.Spec.HostPath.Path)
	return nil
}

// provision creates the volume's directory and the volume. A volume that
// already exists is the one made for this claim before (its name comes
// from the claim's UID).
func (c *ProvisionController) provision(ctx context.Context, pv *corev1.PersistentVolume) error {
	if err := os.MkdirAll(pv.Spec.HostPath.Path, 0o755); err != nil {
		return err
	}
	_, err := c.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// syncVolume removes a released volume: its directory, then the volume,
// with its UID as a precondition so that a volume created again under the
// name is never touched. A volume whose hostPath is not a directory the
// provisioner made gets a Warning Event and is left as it is.
func (c *ProvisionController) syncVolume(ctx context.Context, name string) error {
	pv, err := c.volumes.Get(name)
	if apierrors.IsNotFound(err) || (err == nil && !deletable(pv)) {
		return nil
	}
	if err != nil {
		return err
	}
	dir, err := volumeDir(pv, c.opts.Dir)
	if err != nil {
		c.recorder.Eventf(pv, nil, corev1.EventTypeWarning, ReasonVolumeFailedDelete, "Deleting", "%v", err)
		c.logf("volume %s: not deleted: %v\n", name, err)
		return nil
	}
	if err := c.remove(ctx, pv, dir); err != nil {
		c.recorder.Eventf(pv, nil, corev1.EventTypeWarning, ReasonVolumeFailedDelete, "Deleting", "%v; retrying", err)
		c.logf("volume %s: delete: %v\n", name, err)
		return err
	}
	c.logf("volume %s: released by its claim, deleted with its directory %s\n", name, dir)
	return nil
}

func (c *ProvisionController) remove(ctx context.Context, pv *corev1.PersistentVolume, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	uid := pv.UID
	err := c.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// logf writes one time-stamped line to the log.
func (c *ProvisionController) logf(format string, args ...any) {
	fmt.Fprintf(c.opts.Log, time.Now().Format("15:04:05.000000")+" "+format, args...)
}
