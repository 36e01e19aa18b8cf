package runtimesdk

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// A watch that ends sooner than minWatchLife without an error counts as a
// failure, so a watch the server keeps closing is not reopened in a hot loop.
const minWatchLife = time.Second

var errSessionDeleted = errors.New("session was deleted")

// newReadBackoff returns the backoff between failed reads and watches of
// the Session.
func newReadBackoff() *backoff {
	return &backoff{initial: 200 * time.Millisecond, max: 10 * time.Second}
}

// observation is what the runtime takes from one version of its Session.
type observation struct {
	// requestID and reason of the drain request for this runtime's pod;
	// empty when there is none.
	requestID string
	reason    lullv1.DrainReason
	// keep: the session names another pod (or none) as its pod, so a
	// missing request is not a withdrawal: this runtime is being replaced,
	// and a drained gate stays sealed.
	keep bool
	// ignored explains a request for this pod that was not acted on.
	ignored string
}

// observe reads the drain request of pod from s. A request for another pod
// is no request. A request whose ID is malformed is ignored: its Drained
// report could not be written, so draining for it would only refuse turns.
func observe(s *lullv1.Session, pod types.UID) observation {
	if d := s.Status.Drain; d != nil && d.PodUID == pod {
		if _, _, err := drain.ParseRequestID(d.RequestID); err != nil {
			return observation{keep: s.Status.PodUID != pod, ignored: err.Error()}
		}
		return observation{requestID: d.RequestID, reason: d.Reason}
	}
	return observation{keep: s.Status.PodUID != pod}
}

// notice reads what s tells the runtime of pod without asking anything of
// it: the deadline of a drain request for the pod, and whether the session
// names the pod as its own and that pod runs another revision than the
// update revision.
func notice(s *lullv1.Session, pod types.UID) Notice {
	var n Notice
	if d := s.Status.Drain; d != nil && d.PodUID == pod && d.Deadline != nil {
		n.Deadline = d.Deadline.Time
	}
	st := s.Status
	if st.PodUID == pod && st.UpdateRevision != "" && st.CurrentRevision != "" && st.CurrentRevision != st.UpdateRevision {
		n.UpdatePending, n.UpdateRevision = true, st.UpdateRevision
	}
	return n
}

// apply hands the drain request in s to the gate, and the stored report to
// the reporter while the session names this pod as its pod.
func (r *Runtime) apply(s *lullv1.Session) {
	if s.Status.PodUID == r.cfg.PodUID {
		r.reporter.observe(s.Status.Runtime, s.ResourceVersion)
	}
	held := s.Status.Replacement != nil && s.Status.Replacement.PodUID == r.cfg.PodUID
	if held && !r.gate.Snapshot().Replacing {
		r.log.Info("the session committed to replacing this pod: refusing turns", "reason", s.Status.Replacement.Reason)
	}
	r.gate.SetHeld(held)
	o := observe(s, r.cfg.PodUID)
	if o.ignored != "" {
		r.log.Error("ignoring drain request with a malformed ID", "err", o.ignored)
	}
	before := r.gate.Snapshot()
	switch {
	case o.requestID != "":
		if before.RequestID != o.requestID {
			r.log.Info("drain requested: refusing new turns", "request", o.requestID, "reason", o.reason, "activeTurns", before.ActiveTurns)
		}
		r.gate.SetRequest(o.requestID, o.reason)
	case o.keep:
		// Not a withdrawal: the session has moved on to another pod.
	default:
		if before.RequestID != "" {
			r.log.Info("drain request withdrawn: reopening once Serving is published", "request", before.RequestID)
		}
		r.gate.SetRequest("", "")
	}
	r.gate.SetNotice(notice(s, r.cfg.PodUID))
	// Only now is this version applied: an opening report written with it
	// as its precondition must not land before the gate has acted on it.
	r.reporter.seen(s.ResourceVersion, s.Status.PodUID)
}

// getSession reads the Session, retrying with backoff until it succeeds or
// ctx is done (then it returns nil).
func (r *Runtime) getSession(ctx context.Context, b *backoff) *lullv1.Session {
	for {
		s, err := r.api.Get(ctx)
		if err == nil {
			return s
		}
		if ctx.Err() != nil {
			return nil
		}
		d := b.step()
		r.log.Error("reading session failed; retrying", "err", err, "retryIn", d.Round(time.Millisecond))
		if !sleep(ctx, r.clock, d) {
			return nil
		}
	}
}

// watch follows the Session until ctx is done, starting from s (already
// applied). It keeps the last resourceVersion a watch delivered (in an event
// or a bookmark) and, whenever a watch ends, watches again from there, so
// no change is missed and nothing is read again: an idle runtime costs one
// watch request per 30 to 60 minutes. It watches from the current state
// only when its version is too old to watch from, or once the Session was
// deleted (the server sends a Session of that name when one exists again).
// It never reads the Session again, and never lists.
func (r *Runtime) watch(ctx context.Context, s *lullv1.Session) {
	b := newReadBackoff()
	rv := s.ResourceVersion
	for {
		timeout := watchTimeout()
		started := r.clock.Now()
		last, err := r.follow(ctx, rv, timeout)
		if ctx.Err() != nil {
			return
		}
		if last != "" {
			rv = last
		}
		step := afterWatch(err, r.clock.Since(started), timeout)
		var pause time.Duration
		switch step.pause {
		case pauseSpread:
			b.reset()
			pause = spread(reconnectSpread)
		case pauseBackoff:
			pause = b.step()
		default:
			b.reset()
		}
		switch {
		case step.pause == pauseBackoff:
			r.log.Error("watching session failed; watching again", "err", err, "resourceVersion", rv, "retryIn", pause.Round(time.Millisecond))
		case errors.Is(err, errSessionDeleted):
			r.log.Info("session was deleted; watching for a session of that name")
		case step.from == fromNow:
			r.log.Info("session version too old to watch from; watching from the current state", "resourceVersion", rv, "err", err)
		}
		if !sleep(ctx, r.clock, pause) {
			return
		}
		if step.from == fromNow {
			rv = ""
		}
	}
}

// The watch timeout bounds and the spread of reconnects. A watch lives 30
// to 60 minutes, chosen at random for each watch so that the watches of a
// fleet end at different moments: an idle runtime sends 4/3 watch requests
// an hour on average and nothing else. A watch that ends before its
// timeout ended for every runtime at once, most likely (an API server
// restart, a load balancer dropping connections): the runtimes resume
// spread uniformly over reconnectSpread, 1,000 a second at 5,000 runtimes,
// and since each resumes from its own last version, none reads.
const (
	minWatchTimeout = 30 * time.Minute
	maxWatchTimeout = 60 * time.Minute
	reconnectSpread = 5 * time.Second
)

// watchTimeout returns a timeout uniform in [minWatchTimeout,
// maxWatchTimeout), in whole seconds.
func watchTimeout() time.Duration {
	return (minWatchTimeout + spread(maxWatchTimeout-minWatchTimeout)).Truncate(time.Second)
}

// watchFrom says where the next watch starts.
type watchFrom int

const (
	// fromLast: the last resourceVersion a watch delivered.
	fromLast watchFrom = iota
	// fromNow: the current state ("": the server sends the Session first,
	// if it exists, and when it is created otherwise).
	fromNow
)

// watchPause says how long to wait before the next watch.
type watchPause int

const (
	// pauseNone: at once.
	pauseNone watchPause = iota
	// pauseSpread: a random moment within reconnectSpread.
	pauseSpread
	// pauseBackoff: the next step of the read backoff (exponential, with
	// jitter, up to 10 s).
	pauseBackoff
)

// watchStep is what to do once a watch has ended.
type watchStep struct {
	from  watchFrom
	pause watchPause
}

// afterWatch decides the next watch, given how the last one ended (err,
// nil if the server closed it), how long it lived and the timeout it asked
// for:
//
//   - the Session was deleted: watch from the current state, after the
//     backoff: a Session of that name, now or once it is created again,
//     comes as the watch's first event. (Reading it again instead meant a
//     GET retried every 10 s for as long as the pod outlives its Session,
//     as after kubectl delete --cascade=orphan.);
//   - its version is too old to watch from (410 Gone or Expired, after an
//     API server restart) or newer than the server has (too large): watch
//     from the current state, at once;
//   - any other error (the watch request failed, an error event): from the
//     last version, after the backoff;
//   - closed within minWatchLife: as an error (a server closing every
//     watch at once must not drive a hot loop);
//   - closed at its timeout: from the last version, at once (timeouts are
//     random, so a fleet's do not come together);
//   - closed before its timeout (a restart, a dropped connection, most
//     likely for the whole fleet at once): from the last version, at a
//     random moment within reconnectSpread.
func afterWatch(err error, lived, timeout time.Duration) watchStep {
	switch {
	case errors.Is(err, errSessionDeleted):
		return watchStep{from: fromNow, pause: pauseBackoff}
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge):
		return watchStep{from: fromNow, pause: pauseNone}
	case err != nil, lived < minWatchLife:
		return watchStep{from: fromLast, pause: pauseBackoff}
	case lived >= timeout:
		return watchStep{from: fromLast, pause: pauseNone}
	}
	return watchStep{from: fromLast, pause: pauseSpread}
}

// follow applies the events of one watch from resourceVersion, and returns
// the last resourceVersion it delivered (in an event or a bookmark; "" if
// none) and nil when the watch closes or ctx is done, or an error for a
// failed watch.
func (r *Runtime) follow(ctx context.Context, resourceVersion string, timeout time.Duration) (string, error) {
	w, err := r.api.Watch(ctx, resourceVersion, timeout)
	if err != nil {
		return "", err
	}
	defer w.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return last, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return last, nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				s, ok := ev.Object.(*lullv1.Session)
				if !ok {
					return last, fmt.Errorf("watch sent a %T, want a Session", ev.Object)
				}
				if s.Name == r.cfg.SessionName && s.Namespace == r.cfg.SessionNamespace {
					r.apply(s)
					last = s.ResourceVersion
				}
			case watch.Bookmark:
				// Only the resourceVersion is set: where to resume.
				if s, ok := ev.Object.(*lullv1.Session); ok && s.ResourceVersion != "" {
					last = s.ResourceVersion
				}
			case watch.Deleted:
				if s, ok := ev.Object.(*lullv1.Session); ok && s.Name == r.cfg.SessionName {
					return "", errSessionDeleted
				}
			case watch.Error:
				return last, apierrors.FromObject(ev.Object)
			}
		}
	}
}
