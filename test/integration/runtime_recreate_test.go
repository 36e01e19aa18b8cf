package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/requestmetrics"
	"lull.dev/lull/runtimesdk"
)

// A runtime whose pod outlives its Session (kubectl delete
// --cascade=orphan; here the identity objects have no owner, so they stay)
// waits for a Session of that name with one watch from the current state,
// on the real API server: no GET every few seconds. When the Session is
// created again and names the runtime's pod with a drain request, the
// runtime answers it in the new Session.
func TestRuntimeAwaitsItsDeletedSessionWithOneWatch(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "recreate")
	ctx := t.Context()
	s := newSession(ns, "again", "tpl")
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	createIdentity(t, s)
	pod := createRuntimePod(t, s, s.Name+"-0")
	tally := requestmetrics.NewTally()
	cfg := runtimeTokenConfig(t, s, pod)
	cfg.WrapTransport = tally.Wrap
	rt := runRuntime(t, runtimesdk.Config{
		SessionName: s.Name, SessionNamespace: ns, PodName: pod.Name, PodUID: pod.UID, REST: cfg,
	}, false)
	report := func(ctx context.Context) (*lullv1.RuntimeReport, error) {
		got, err := getSession(ctx, ns, s.Name)
		if err != nil {
			return nil, err
		}
		if got.Status.Runtime == nil || got.Status.Runtime.PodUID != pod.UID {
			return nil, fmt.Errorf("status.runtime %+v", got.Status.Runtime)
		}
		return got.Status.Runtime, nil
	}
	eventually(t, 15*time.Second, "the Serving report and the watch open", func(ctx context.Context) error {
		r, err := report(ctx)
		if err != nil {
			return err
		}
		if r.State != lullv1.RuntimeServing || !rt.Snapshot().Accepting {
			return fmt.Errorf("report %+v, accepting %v", r, rt.Snapshot().Accepting)
		}
		if tally.Counts()["WATCH sessions"] == 0 {
			return errors.New("no watch yet")
		}
		return nil
	})

	before := tally.Counts()
	if err := admin.Delete(ctx, sessionRef(ns, s.Name)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the Session gone", func(ctx context.Context) error {
		if _, err := getSession(ctx, ns, s.Name); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get: %v", err)
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	if got := since(tally, before); got["GET sessions"] != 0 || got["WATCH sessions"] > 1 || len(got) > 1 {
		t.Errorf("requests in the 3 s after the Session was deleted: %v, want at most one watch", got)
	}

	again := newSession(ns, s.Name, "tpl")
	if err := admin.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	reqID := drain.RequestID(pod.UID, lullv1.DrainReasonUpdate, 1)
	if err := admin.Status().Patch(ctx, sessionRef(ns, s.Name), mergePatch(fmt.Sprintf(
		`{"status":{"phase":"Draining","podName":%q,"podUID":%q,"drain":{"requestID":%q,"podUID":%q,"reason":"Update","revision":"rev-2","requestedAt":%q}}}`,
		pod.Name, pod.UID, reqID, pod.UID, time.Now().UTC().Format(time.RFC3339)))); err != nil {
		t.Fatalf("write status.drain: %v", err)
	}
	eventually(t, 15*time.Second, "Drained for the new Session's request", func(ctx context.Context) error {
		r, err := report(ctx)
		if err != nil {
			return err
		}
		if r.State != lullv1.RuntimeDrained || r.RequestID != reqID {
			return fmt.Errorf("report %+v", r)
		}
		return nil
	})
}
