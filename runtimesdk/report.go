package runtimesdk

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

const (
	// drainingReportInterval is the least time between two Draining
	// reports of one request that differ only in turn count or activity
	// (unless the refresh bound is shorter): the controller waits on them.
	drainingReportInterval = time.Second
	// writeTimeout bounds one status write.
	writeTimeout = 10 * time.Second
)

// reporter writes the gate's state to status.runtime, and only when what
// the report says has changed: nothing changed, no request. It writes at
// once on a change of state or request (Drained above all: the controller
// deletes the pod on it) or of the expired-turn count (an expiry may have
// taken live work), and of activity while an Idle drain request is
// outstanding (the user is back: the controller withdraws the request
// when it sees it). Other changes of turn count and activity are
// coalesced: written refresh after the last write at the latest (every
// drainingReportInterval during a drain), so refresh is the longest a
// change stays unwritten, the granularity of activity the idle policy
// sees, and a busy runtime writes at most once per refresh. An idle
// runtime writes nothing after its first report. (Before, the report was
// rewritten every refresh as a heartbeat; at 5,000 sessions that was 83
// writes a second for nothing. The controller needs no heartbeat: a cull
// is a drain request that only a live runtime can answer, see
// docs/protocol.md.) It retries failed writes with backoff. After each
// write it tells the gate with Published, which reopens a gate waiting on
// Serving. One reporter is the only writer of status.runtime for its pod,
// and it writes one report at a time; once the session has moved on to
// another pod it writes nothing more.
type reporter struct {
	api  sessionAPI
	gate *Gate
	pod  types.UID
	log  *slog.Logger
	// clock is the time reports are due by and stamped with.
	clock clock.Clock

	drainingInterval time.Duration
	// refresh is the longest a change of turn count or activity stays
	// unwritten; refreshSeconds is what every report says it is
	// (RefreshSeconds), never less.
	refresh        time.Duration
	refreshSeconds int32
	// started is what every report says of when this process started
	// (RuntimeReport.StartedAt; Config.OmitStart); nil: left out.
	started *metav1.Time

	retry backoff
	// reassert spaces rewrites of a report someone else overwrote, so a
	// writer that keeps overwriting it does not drive a write loop.
	reassert backoff

	// stored receives what the Session watch sees in status.runtime while
	// the session names this runtime's pod as its pod; latest wins.
	stored chan storedReport
	// namedAgain wakes the loop when a session that had moved on names
	// this runtime's pod again, so a report held back meanwhile goes out.
	namedAgain chan struct{}

	mu       sync.Mutex
	latestRV string // the Session version the runtime last applied
	// named: a version the runtime applied named this runtime's pod as
	// the session's pod.
	named bool
	// movedOn: the session named this runtime's pod, and in the version
	// last applied it names another pod as its pod: this runtime was
	// replaced. Its report would then only overwrite that pod's, so it
	// writes none. A runtime whose session has not yet named its pod (a
	// new pod, while the session still names the pod it replaced: the
	// controller is behind or down) was not replaced, and reports.
	movedOn bool
}

// seen records the Session version the runtime has just applied, and the
// pod the session names as its pod in it ("" for none).
func (r *reporter) seen(resourceVersion string, sessionPod types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latestRV = resourceVersion
	if sessionPod == r.pod {
		r.named = true
	}
	was := r.movedOn
	r.movedOn = r.named && sessionPod != "" && sessionPod != r.pod
	if was && !r.movedOn {
		select {
		case r.namedAgain <- struct{}{}:
		default:
		}
	}
}

func (r *reporter) sessionMovedOn() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.movedOn
}

func (r *reporter) lastSeen() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latestRV
}

// storedReport is status.runtime in one version of the Session.
type storedReport struct {
	report          *lullv1.RuntimeReport
	resourceVersion uint64 // 0 if not a number
}

// newReporter returns the reporter of pod's runtime, which leaves a change
// of activity unwritten for refresh at most (see Config.reportRefresh),
// by clk.
func newReporter(api sessionAPI, gate *Gate, pod types.UID, refresh time.Duration, refreshSeconds int32, log *slog.Logger, clk clock.Clock) *reporter {
	return &reporter{
		api: api, gate: gate, pod: pod, log: log, clock: clk,
		drainingInterval: drainingReportInterval,
		refresh:          refresh,
		refreshSeconds:   refreshSeconds,
		retry:            backoff{initial: 100 * time.Millisecond, max: 10 * time.Second},
		reassert:         backoff{initial: time.Second, max: 30 * time.Second},
		stored:           make(chan storedReport, 1),
		namedAgain:       make(chan struct{}, 1),
	}
}

// observe hands the reporter status.runtime as the watch saw it, for a
// session whose current pod is this runtime's. If it differs from what the
// reporter last wrote (an admin, a stale writer or a bug overwrote it), the
// reporter writes its report again: a report lost that way would otherwise
// never be repeated, and a drain could wait forever for a Drained already
// given. Versions older than the reporter's last write are ignored: a watch
// delivers them after the write returned. It never blocks.
func (r *reporter) observe(report *lullv1.RuntimeReport, resourceVersion string) {
	rv, _ := strconv.ParseUint(resourceVersion, 10, 64)
	select {
	case <-r.stored:
	default:
	}
	r.stored <- storedReport{report: report.DeepCopy(), resourceVersion: rv}
}

// run reports until ctx is done.
func (r *reporter) run(ctx context.Context) {
	snapshots, cancel := r.gate.Subscribe()
	defer cancel()
	timer := r.clock.NewTimer(0)
	timer.Stop()
	defer timer.Stop()

	var (
		latest    Snapshot
		written   *lullv1.RuntimeReport // last report known to be on the server; nil if unknown
		writtenAt time.Time
		writtenRV uint64    // the Session's resourceVersion after that write; 0 if not a number
		notBefore time.Time // end of the retry backoff
	)
	for {
		select {
		case <-ctx.Done():
			return
		case latest = <-snapshots:
		case <-timer.C():
		case <-r.namedAgain:
		case stored := <-r.stored:
			switch {
			case written == nil || stored.resourceVersion == 0 || writtenRV == 0 || stored.resourceVersion <= writtenRV:
				// Nothing known on the server, a version that cannot be
				// ordered, or one from before our last write.
			case sameReport(stored.report, written):
				r.reassert.reset()
			default:
				// Overwritten: write ours again, after a pause that grows
				// while someone keeps overwriting it.
				r.log.Info("status.runtime was overwritten; writing the report again", "found", describeReport(stored.report))
				written = nil
				notBefore = laterOf(notBefore, r.clock.Now().Add(r.reassert.step()))
			}
		}
		if latest.State == "" {
			// Woken before the gate's first snapshot was read (by the
			// report the runtime read at start): nothing to report yet.
			continue
		}
		want := reportFor(r.pod, latest, r.refreshSeconds, r.started)
		if sameReport(want, written) {
			// Nothing to write: no request, and no timer to wake for.
			r.gate.Published(written.State)
			continue
		}
		if r.sessionMovedOn() {
			// The session moved on to another pod: a write would only
			// overwrite that pod's report. A later version naming this
			// pod again reaches the loop as a stored report.
			continue
		}
		now := r.clock.Now()
		if at := laterOf(notBefore, r.due(want, written, writtenAt, latest.Reason)); now.Before(at) {
			rearm(timer, at.Sub(now))
			continue
		}
		rv, err := r.write(ctx, want)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			written = nil // the write may or may not have landed
			d := r.retry.step()
			notBefore = now.Add(d)
			rearm(timer, d)
			r.log.Error("writing runtime report failed; retrying", "state", want.State, "request", want.RequestID, "err", err, "retryIn", d.Round(time.Millisecond))
			continue
		}
		r.retry.reset()
		notBefore = time.Time{}
		written, writtenAt = want, r.clock.Now()
		writtenRV, _ = strconv.ParseUint(rv, 10, 64)
		r.gate.Published(want.State)
	}
}

// due returns when want, which differs from the report written at
// writtenAt, may be written, given the reason of the drain request being
// served: at once for a new state, request, pod or expired-turn count, and
// for new activity while the request is an Idle one (a user back in a
// session being suspended; the report keeps activity to the second, so
// this is at most one write a second); otherwise, for a change of active
// turn count or activity alone, refresh after the last write (during a
// drain, drainingReportInterval after it if that is sooner). A change is
// thus never unwritten for longer than refresh, and the runtime writes no
// more than once per refresh for activity alone.
func (r *reporter) due(want, written *lullv1.RuntimeReport, writtenAt time.Time, reason lullv1.DrainReason) time.Time {
	if written == nil || want.State != written.State || want.RequestID != written.RequestID || want.PodUID != written.PodUID ||
		want.ExpiredTurns != written.ExpiredTurns || want.RefreshSeconds != written.RefreshSeconds {
		return time.Time{}
	}
	if reason == lullv1.DrainReasonIdle && want.RequestID != "" && !timeEqual(want.LastActivity, written.LastActivity) {
		return time.Time{}
	}
	interval := r.refresh
	if want.State == lullv1.RuntimeDraining {
		interval = min(interval, r.drainingInterval)
	}
	return writtenAt.Add(interval)
}

// write patches status.runtime with report, stamped with the time, and
// returns the Session's resourceVersion after the write.
//
// A Serving report that would open the gate is written with the Session
// version the runtime last applied as a precondition: it fails with a
// Conflict if the Session changed since (a replacement committed for this
// pod, a drain request), and the gate stays sealed until the runtime has
// seen that change. Without it, a runtime could open on a view the
// controller had already acted on: the controller commits to replacing a
// pod whose runtime has not reported, with the Session's version as its own
// precondition, so of the two writes only the first lands.
func (r *reporter) write(ctx context.Context, report *lullv1.RuntimeReport) (string, error) {
	stamped := report.DeepCopy()
	now := metav1.NewTime(r.clock.Now().Truncate(time.Second))
	stamped.ReportedAt = &now
	patch, err := drain.EncodeReport(stamped)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	precondition := ""
	if report.State == lullv1.RuntimeServing && r.gate.Opening() {
		precondition = r.lastSeen()
	}
	rv, err := r.api.PatchStatus(ctx, patch, precondition)
	if err != nil {
		return "", err
	}
	r.log.Debug("reported", "state", report.State, "request", report.RequestID, "activeTurns", report.ActiveTurns)
	return rv, nil
}

// reportFor returns the report of pod for snapshot s, without ReportedAt,
// saying a change of activity stays unwritten for refreshSeconds at most
// and that the process started at started (nil: not said). LastActivity is
// kept to the second, the precision the API stores.
func reportFor(pod types.UID, s Snapshot, refreshSeconds int32, started *metav1.Time) *lullv1.RuntimeReport {
	r := &lullv1.RuntimeReport{
		PodUID:         pod,
		StartedAt:      started,
		RequestID:      s.RequestID,
		State:          s.State,
		ActiveTurns:    int32(s.ActiveTurns),
		ExpiredTurns:   s.ExpiredTurns,
		RefreshSeconds: refreshSeconds,
	}
	if !s.LastActivity.IsZero() {
		t := metav1.NewTime(s.LastActivity.Truncate(time.Second))
		r.LastActivity = &t
	}
	return r
}

func describeReport(r *lullv1.RuntimeReport) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("pod %s state %s request %q turns %d", r.PodUID, r.State, r.RequestID, r.ActiveTurns)
}

// sameReport reports whether a and b say the same, ReportedAt aside.
func sameReport(a, b *lullv1.RuntimeReport) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.PodUID == b.PodUID && a.RequestID == b.RequestID && a.State == b.State &&
		a.ActiveTurns == b.ActiveTurns && a.ExpiredTurns == b.ExpiredTurns && timeEqual(a.LastActivity, b.LastActivity) &&
		a.RefreshSeconds == b.RefreshSeconds && timeEqual(a.StartedAt, b.StartedAt)
}

func timeEqual(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}

// rearm makes timer fire d from now, dropping a firing it has not yet
// delivered. A timer of the real clock drops it on Reset by itself; a
// fake clock's (k8s.io/utils/clock/testing) keeps it in the timer's
// channel, and its next firing would then hold the clock (and every
// reader of it, this reporter too) until the channel is read.
func rearm(timer clock.Timer, d time.Duration) {
	if !timer.Stop() {
		select {
		case <-timer.C():
		default:
		}
	}
	timer.Reset(d)
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
