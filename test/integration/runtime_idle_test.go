package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/requestmetrics"
	"lull.dev/lull/runtimesdk"
)

// since returns the requests tally counted after before was taken, by
// "VERB resource" (requestmetrics.Tally's keys).
func since(tally *requestmetrics.Tally, before map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range tally.Counts() {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// An idle, current session's runtime costs no API request: with a report
// refresh of 1 s, counted at the runtime's own transport against the real
// API server, it makes no request at all over 5 s once its report is
// written and its watch open (no heartbeat, no re-read, no re-watch); a
// bump of activity costs one status write, made within the refresh; a turn
// at most two (its start at once, its end coalesced), and then it is
// quiet again.
func TestIdleRuntimeMakesNoRequests(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "idle-cost")
	ctx := t.Context()
	s := newSession(ns, "idle", "tpl")
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	createIdentity(t, s)
	pod := createRuntimePod(t, s, s.Name+"-0")
	tally := requestmetrics.NewTally()
	cfg := runtimeTokenConfig(t, s, pod)
	cfg.WrapTransport = tally.Wrap
	const refresh = time.Second
	const patchStatus = "PATCH sessions/status"
	rt := runRuntime(t, runtimesdk.Config{
		SessionName: s.Name, SessionNamespace: ns, PodName: pod.Name, PodUID: pod.UID,
		REST: cfg, ReportRefresh: refresh,
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
	eventually(t, 15*time.Second, "the Serving report, the gate open and the watch open", func(ctx context.Context) error {
		r, err := report(ctx)
		if err != nil {
			return err
		}
		if r.State != lullv1.RuntimeServing || r.RefreshSeconds != 1 || !rt.Snapshot().Accepting {
			return fmt.Errorf("report %+v, accepting %v", r, rt.Snapshot().Accepting)
		}
		if tally.Counts()["WATCH sessions"] == 0 {
			return errors.New("no watch yet")
		}
		return nil
	})
	quiet := func(what string) {
		t.Helper()
		before := tally.Counts()
		time.Sleep(5 * refresh)
		if got := since(tally, before); len(got) != 0 {
			t.Errorf("%s: the runtime made requests %v over 5s with a 1s refresh, want none", what, got)
		}
	}
	time.Sleep(2 * refresh) // a report of the gate opening, if any, lands
	quiet("idle")

	before := tally.Counts()
	bumped := time.Now()
	rt.Bump()
	eventually(t, 10*time.Second, "the bump written", func(ctx context.Context) error {
		r, err := report(ctx)
		if err != nil {
			return err
		}
		if r.LastActivity == nil || r.LastActivity.Time.Before(bumped.Truncate(time.Second)) {
			return fmt.Errorf("lastActivity %v", r.LastActivity)
		}
		return nil
	})
	if d := time.Since(bumped); d > refresh+2*time.Second {
		t.Errorf("the bump was written %v after it, want within the 1s refresh (and the time to read it back)", d)
	}
	time.Sleep(2 * refresh)
	if got := since(tally, before); len(got) != 1 || got[patchStatus] != 1 {
		t.Errorf("a bump cost requests %v, want one status patch", got)
	}

	before = tally.Counts()
	turn, err := rt.BeginTurn(runtimesdk.TurnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	turn.End()
	ended := time.Now()
	eventually(t, 10*time.Second, "the turn's end written", func(ctx context.Context) error {
		r, err := report(ctx)
		if err != nil {
			return err
		}
		if r.ActiveTurns != 0 || r.LastActivity == nil || r.LastActivity.Time.Before(ended.Truncate(time.Second)) {
			return fmt.Errorf("report %+v", r)
		}
		return nil
	})
	time.Sleep(2 * refresh)
	if got := since(tally, before); len(got) != 1 || got[patchStatus] < 1 || got[patchStatus] > 2 {
		t.Errorf("a turn cost requests %v, want one or two status patches and nothing else", got)
	}
	quiet("idle after the turn")
}
