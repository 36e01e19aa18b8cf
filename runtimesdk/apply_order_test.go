package runtimesdk

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// pauseHandler is a slog.Handler that stops the goroutine logging a message
// with the given prefix until release is closed: a deterministic stand-in
// for that goroutine being descheduled at that point.
type pauseHandler struct {
	prefix  string
	reached chan struct{}
	release chan struct{}
	once    *sync.Once
}

func (h pauseHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h pauseHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h pauseHandler) WithGroup(string) slog.Handler            { return h }
func (h pauseHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.once.Do(func() { close(h.reached); <-h.release })
	}
	return nil
}

// apply records a Session version as seen (reporter.seen) before it hands
// that version's content to the gate (SetHeld, SetRequest). The opening
// Serving report takes its precondition from lastSeen, so a report written
// in between is conditional on a version whose commitment the gate has not
// applied yet: the precondition matches, the write lands, Published(Serving)
// finds the gate not held, and the gate opens on a pod the controller has
// committed to replacing (and may be deleting).
//
//  1. The runtime starts on version 1 (nothing committed); its opening
//     report has not landed yet (a transient error, retried).
//  2. The controller commits status.replacement = {this pod, NeverStarted}
//     (version 2). The watch delivers it; apply records 2 as seen, and is
//     descheduled before SetHeld(true).
//  3. The reporter retries: Opening() is true (not held yet), lastSeen is
//     2, the precondition holds, the report lands, the gate opens.
//  4. A turn is accepted on the committed pod.
func TestGateNeverOpensOnAVersionItHasNotApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		var failing atomic.Bool
		failing.Store(true)
		f.patchErr = func(*lullv1.RuntimeReport) (error, bool) {
			if failing.Load() {
				return errInjected, false
			}
			return nil, false
		}
		h := pauseHandler{prefix: "the session committed to replacing this pod", reached: make(chan struct{}), release: make(chan struct{}), once: &sync.Once{}}
		cfg := testConfig(f)
		cfg.Logger = slog.New(h)
		rt := newRuntime(cfg, f)
		rt.reporter.retry = backoff{initial: time.Millisecond, max: 5 * time.Millisecond}
		runRuntime(t, rt)
		defer func() {
			select {
			case <-h.release:
			default:
				close(h.release)
			}
		}()
		settled(t, "the watch is open", func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return len(f.watchers) > 0
		})

		// 2. The commitment.
		f.update(func(s *lullv1.SessionStatus) {
			s.Replacement = &lullv1.Replacement{PodUID: testPod, Reason: lullv1.ReplacementNeverStarted, CommittedAt: metav1.NewTime(f.clock.Now())}
		})
		synctest.Wait()
		select {
		case <-h.reached:
		default:
			// apply logs nothing there any more: nothing to pause on.
		}
		// 3. The API server answers again, and the reporter retries.
		failing.Store(false)
		for range 10 {
			advance(f.clock, 10*time.Millisecond)
			if turn, err := rt.BeginTurn(TurnOptions{}); err == nil {
				turn.End()
				f.mu.Lock()
				pre := f.preconditions[len(f.preconditions)-1]
				f.mu.Unlock()
				t.Fatalf("a turn was accepted while status.replacement names this pod: the opening report was written "+
					"with precondition %q, a version apply had recorded as seen but not yet applied to the gate", pre)
			}
		}
	})
}
