package devstorage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"lull.dev/lull/internal/dev/testenv"
)

// testLog sends the provisioner's log lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// runProvisioner runs a provision controller against cs until the test
// ends; it returns the volume directory.
func runProvisioner(t *testing.T, cs *fake.Clientset) string {
	t.Helper()
	dir := t.TempDir()
	c := newProvisionController(Options{Dir: dir, Log: testLog{t}}, cs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return dir
}

// eventually is testenv.Eventually; these tests wait at most 10 s.
var eventually = testenv.Eventually

// event finds the Event of reason about the object named regarding.
func event(t *testing.T, cs *fake.Clientset, ns, regarding, reason string) (*eventsv1.Event, error) {
	list, err := cs.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i, e := range list.Items {
		if e.Regarding.Name == regarding && e.Reason == reason {
			return &list.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no %s event about %s among %d", reason, regarding, len(list.Items))
}

func TestProvisionsServedClaims(t *testing.T) {
	other := claim(func(c *corev1.PersistentVolumeClaim) {
		c.Name, c.UID, c.Annotations = "other-class", "o1", nil
		c.Spec.StorageClassName = ptr.To("standard")
	})
	cs := fake.NewClientset(other)
	dir := runProvisioner(t, cs)

	// Created after the other-class claim: once it is served, the one
	// worker has looked at the other too.
	c := claim()
	if _, err := cs.CoreV1().PersistentVolumeClaims("ns").Create(t.Context(), c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pv *corev1.PersistentVolume
	eventually(t, 10*time.Second, "volume pvc-0b5c created", func() (err error) {
		pv, err = cs.CoreV1().PersistentVolumes().Get(t.Context(), "pvc-0b5c", metav1.GetOptions{})
		return err
	})
	if want := volumeFor(c, dir); pv.Spec.HostPath.Path != want.Spec.HostPath.Path || pv.Spec.ClaimRef.UID != "0b5c" {
		t.Errorf("volume %+v, want %+v", pv.Spec, want.Spec)
	}
	if fi, err := os.Stat(filepath.Join(dir, "pvc-0b5c")); err != nil || !fi.IsDir() {
		t.Errorf("volume directory: %v", err)
	}
	eventually(t, 10*time.Second, "ProvisioningSucceeded event", func() error {
		_, err := event(t, cs, "ns", c.Name, ReasonProvisioningSucceeded)
		return err
	})
	if _, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), "pvc-o1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("claim of class standard got a volume: %v", err)
	}
}

func TestRefusedClaimGetsWarning(t *testing.T) {
	block := claim(func(c *corev1.PersistentVolumeClaim) {
		c.Name, c.UID = "block", "b1"
		c.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
	})
	cs := fake.NewClientset(block)
	dir := runProvisioner(t, cs)

	var e *eventsv1.Event
	eventually(t, 10*time.Second, "ProvisioningFailed event", func() (err error) {
		e, err = event(t, cs, "ns", "block", ReasonProvisioningFailed)
		return err
	})
	if e.Type != corev1.EventTypeWarning || !strings.Contains(e.Note, "spec.volumeMode") {
		t.Errorf("event %s %q, want a Warning naming spec.volumeMode", e.Type, e.Note)
	}
	if _, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), "pvc-b1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("refused claim got a volume: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused claim got a directory: %v", entries)
	}
}

func TestRetriesFailedCreate(t *testing.T) {
	cs := fake.NewClientset(claim())
	var fails atomic.Int32
	cs.PrependReactor("create", "persistentvolumes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fails.Add(1) <= 2 {
			return true, nil, apierrors.NewServiceUnavailable("etcd is restarting")
		}
		return false, nil, nil
	})
	runProvisioner(t, cs)
	eventually(t, 10*time.Second, "volume created after two failures", func() error {
		_, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), "pvc-0b5c", metav1.GetOptions{})
		return err
	})
	e, err := event(t, cs, "ns", "workspace-s-0", ReasonProvisioningFailed)
	if err != nil || !strings.Contains(e.Note, "etcd is restarting") {
		t.Errorf("failed attempts: event %v, %v", e, err)
	}
}

func TestDeletesReleasedVolumes(t *testing.T) {
	cs := fake.NewClientset()
	dir := runProvisioner(t, cs)
	volume := func(name string, policy corev1.PersistentVolumeReclaimPolicy) *corev1.PersistentVolume {
		pv := volumeFor(claim(func(c *corev1.PersistentVolumeClaim) { c.UID = "x" }), dir)
		pv.Name, pv.UID = name, types.UID("uid-"+name)
		pv.Spec.HostPath.Path = filepath.Join(dir, name)
		pv.Spec.PersistentVolumeReclaimPolicy = policy
		pv.Status.Phase = corev1.VolumeReleased
		if err := os.MkdirAll(pv.Spec.HostPath.Path, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pv.Spec.HostPath.Path, "notes.md"), []byte("kept?"), 0o644); err != nil {
			t.Fatal(err)
		}
		return pv
	}
	retained := volume("pvc-retained", corev1.PersistentVolumeReclaimRetain)
	bound := volume("pvc-bound", corev1.PersistentVolumeReclaimDelete)
	bound.Status.Phase = corev1.VolumeBound
	released := volume("pvc-released", corev1.PersistentVolumeReclaimDelete)
	for _, pv := range []*corev1.PersistentVolume{retained, bound, released} { // the one worker takes them in order
		if _, err := cs.CoreV1().PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "released volume deleted", func() error {
		if _, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), released.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("volume still there: %v", err)
		}
		return nil
	})
	if _, err := os.Stat(released.Spec.HostPath.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("released volume's directory: %v, want it removed", err)
	}
	for _, pv := range []*corev1.PersistentVolume{retained, bound} {
		if _, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), pv.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v, want it kept", pv.Name, err)
		}
		if _, err := os.Stat(filepath.Join(pv.Spec.HostPath.Path, "notes.md")); err != nil {
			t.Errorf("%s: %v, want its directory kept", pv.Name, err)
		}
	}
}

func TestLeavesForeignDirectory(t *testing.T) {
	outside := t.TempDir()
	pv := volumeFor(claim(), "/elsewhere")
	pv.Spec.HostPath.Path = outside
	pv.Status.Phase = corev1.VolumeReleased
	cs := fake.NewClientset(pv)
	runProvisioner(t, cs)
	var e *eventsv1.Event
	eventually(t, 10*time.Second, "VolumeFailedDelete event", func() (err error) {
		e, err = event(t, cs, "default", pv.Name, ReasonVolumeFailedDelete)
		return err
	})
	if !strings.Contains(e.Note, "spec.hostPath.path") {
		t.Errorf("event note %q does not name spec.hostPath.path", e.Note)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("directory outside the volume root: %v, want it kept", err)
	}
	if _, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), pv.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("volume: %v, want it kept", err)
	}
}
