package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/runtimesdk"
)

// testLogWriter sends slog lines to the test log while the test runs.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestRuntimeSDK runs the Go runtime SDK as a session's runtime identity
// against the real API server, with the test writing status.drain as the
// controller would.
func TestRuntimeSDK(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "sdk")
	ctx := t.Context()

	s := newSession(ns, "sdk", "tpl")
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	createIdentity(t, s)
	// The runtime's pod, and a token bound to it as the kubelet's projected
	// token is: the admission policy admits only reports of the caller's pod.
	pod := createRuntimePod(t, s, s.Name+"-0")
	podUID := pod.UID

	rt := runRuntime(t, runtimesdk.Config{
		SessionName:      s.Name,
		SessionNamespace: ns,
		PodName:          pod.Name,
		PodUID:           podUID,
		REST:             runtimeTokenConfig(t, s, pod),
	}, true)

	waitReport := func(what string, ok func(r *lullv1.RuntimeReport) error) *lullv1.RuntimeReport {
		t.Helper()
		var r *lullv1.RuntimeReport
		eventually(t, 15*time.Second, what, func(ctx context.Context) error {
			got, err := getSession(ctx, ns, s.Name)
			if err != nil {
				return err
			}
			if r = got.Status.Runtime; r == nil {
				return errors.New("no status.runtime")
			}
			if r.PodUID != podUID {
				return fmt.Errorf("status.runtime.podUID = %q, want %q", r.PodUID, podUID)
			}
			if err := ok(r); err != nil {
				return fmt.Errorf("status.runtime %+v: %w", r, err)
			}
			return nil
		})
		return r
	}
	state := func(want lullv1.RuntimeState, turns int32, requestID string) func(r *lullv1.RuntimeReport) error {
		return func(r *lullv1.RuntimeReport) error {
			if r.State != want || r.ActiveTurns != turns || r.RequestID != requestID {
				return fmt.Errorf("want state %s, %d active turns, request %q", want, turns, requestID)
			}
			return nil
		}
	}
	beginTurn := func(what string) *runtimesdk.Turn {
		t.Helper()
		var turn *runtimesdk.Turn
		eventually(t, 10*time.Second, what, func(context.Context) error {
			var err error
			turn, err = rt.BeginTurn(runtimesdk.TurnOptions{})
			return err
		})
		return turn
	}

	waitReport("runtime reports Serving", state(lullv1.RuntimeServing, 0, ""))
	turn := beginTurn("runtime accepts a turn once Serving is published")

	// The controller's drain request for this pod.
	reqID := drain.RequestID(podUID, lullv1.DrainReasonUpdate, 2)
	if err := admin.Status().Patch(ctx, sessionRef(ns, s.Name), mergePatch(fmt.Sprintf(
		`{"status":{"phase":"Draining","podName":%q,"podUID":%q,"drain":{"requestID":%q,"podUID":%q,"reason":"Update","revision":"rev-2","requestedAt":%q}}}`,
		pod.Name, podUID, reqID, podUID, time.Now().UTC().Format(time.RFC3339)))); err != nil {
		t.Fatalf("write status.drain: %v", err)
	}

	waitReport("runtime reports Draining with the turn in flight", state(lullv1.RuntimeDraining, 1, reqID))
	_, err := rt.BeginTurn(runtimesdk.TurnOptions{})
	if !errors.Is(err, runtimesdk.ErrDraining) {
		t.Fatalf("BeginTurn while draining: got %v, want ErrDraining", err)
	}
	var de *runtimesdk.DrainingError
	if !errors.As(err, &de) || de.RequestID != reqID || de.Reason != lullv1.DrainReasonUpdate {
		t.Errorf("BeginTurn while draining: error %#v, want a DrainingError for request %s", err, reqID)
	}

	turn.End()
	waitReport("runtime reports Drained once the turn ends", state(lullv1.RuntimeDrained, 0, reqID))
	if _, err := rt.BeginTurn(runtimesdk.TurnOptions{}); !errors.Is(err, runtimesdk.ErrDraining) {
		t.Fatalf("BeginTurn while drained: got %v, want ErrDraining (sealed)", err)
	}

	// The controller withdraws the request (the pod is not replaced).
	if err := admin.Status().Patch(ctx, sessionRef(ns, s.Name), mergePatch(`{"status":{"phase":"Running","drain":null}}`)); err != nil {
		t.Fatalf("withdraw status.drain: %v", err)
	}
	waitReport("runtime reports Serving after the withdrawal", func(r *lullv1.RuntimeReport) error {
		if r.State != lullv1.RuntimeServing || r.ActiveTurns != 0 {
			return errors.New("want state Serving, 0 active turns")
		}
		return nil
	})
	turn = beginTurn("runtime accepts turns again after the withdrawal")
	turn.End()

	// A Serving report names no request: the withdrawn one must not linger
	// in status.runtime.
	if r := mustGetSession(t, ns, s.Name).Status.Runtime; r.RequestID != "" {
		t.Errorf("Serving report after the withdrawal still names request %q, want none", r.RequestID)
	}
}

// runRuntime starts a runtime of cfg (logging to the test's log when cfg
// has no Logger) until the test ends, then waits up to 15 s for Run to
// return; with cleanExit, an error from Run fails the test.
func runRuntime(t *testing.T, cfg runtimesdk.Config, cleanExit bool) *runtimesdk.Runtime {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	rt, err := runtimesdk.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if cleanExit && err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("Run did not return within 15s of its context ending")
		}
	})
	return rt
}
