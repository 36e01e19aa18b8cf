package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
		if !sleep(ctx, d) {
			return nil
		}
	}
}

// watch follows the Session until ctx is done, starting from s (already
// applied). Whenever a watch ends it reads the Session again and watches
// from there, so no change is missed; it never lists.
func (r *Runtime) watch(ctx context.Context, s *lullv1.Session) {
	b := newReadBackoff()
	for {
		if s == nil {
			if s = r.getSession(ctx, b); s == nil {
				return
			}
			r.apply(s)
		}
		started := time.Now()
		err := r.follow(ctx, s.ResourceVersion)
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			// The Session's version is older than the API server's watch
			// window (a restarted API server starts its window at the
			// current revision, and a Session not written since is older).
			// Reading again gives the same version: watch from now, the
			// server sending the current Session first.
			r.log.Info("session version too old to watch from; watching from the current state", "resourceVersion", s.ResourceVersion)
			err = r.follow(ctx, "")
		}
		s = nil
		if ctx.Err() != nil {
			return
		}
		if err == nil && time.Since(started) >= minWatchLife {
			// A watch the server ended. When it ends for every runtime at
			// once (an API server restart), reading again at once would be
			// a synchronized burst: spread the reads over a second.
			b.reset()
			if !sleep(ctx, spread(time.Second)) {
				return
			}
			continue
		}
		if err == nil {
			err = errors.New("watch closed at once")
		}
		d := b.step()
		r.log.Error("watching session failed; reading it again", "err", err, "retryIn", d.Round(time.Millisecond))
		if !sleep(ctx, d) {
			return
		}
	}
}

// follow applies the events of one watch from resourceVersion. It returns
// nil when the watch closes or ctx is done, and an error for a failed watch.
func (r *Runtime) follow(ctx context.Context, resourceVersion string) error {
	w, err := r.api.Watch(ctx, resourceVersion)
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				s, ok := ev.Object.(*lullv1.Session)
				if !ok {
					return fmt.Errorf("watch sent a %T, want a Session", ev.Object)
				}
				if s.Name == r.cfg.SessionName && s.Namespace == r.cfg.SessionNamespace {
					r.apply(s)
				}
			case watch.Deleted:
				if s, ok := ev.Object.(*lullv1.Session); ok && s.Name == r.cfg.SessionName {
					return errSessionDeleted
				}
			case watch.Error:
				return apierrors.FromObject(ev.Object)
			}
		}
	}
}
