package rollout

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// The blocked schedule: a blocked session is tried again retryFirst after
// its problem began, then after each wait twice the last, at most
// retryLimit (NextRetry, lastRetry).
const retryFirst, retryLimit = 5 * time.Second, 5 * time.Minute

// BlockedStatus returns the controller's part of the status of a session
// that cannot move until something the controller does not watch changes,
// and the Block step it records: reason and msg say what (a missing template,
// objects the API server refuses, a name taken by an object lull does not
// own, a runtime image the catalog refuses, a pod the StatefulSet
// controller cannot create, a predecessor's objects still there, the
// template's files not there yet). Nothing running is touched: Ready is
// False and UpToDate Unknown, both with reason and msg and the time of the
// next try. An outstanding drain request is withdrawn (phase and
// conditions follow): while lull cannot act on a drained runtime, it must
// not hold it sealed. A request whose replacement is committed for the
// pod is kept: another controller may be deleting that pod, so its runtime
// must stay sealed.
//
// The next try is NextRetry from when the problem began (RefusedSince: the
// UpToDate condition's transition time once it says reason, else now),
// and the action's RequeueAfter is the time until then. A new reason sets
// both conditions' transition times to now, even where a condition's
// status stays what it was: the backoff counts from there.
//
// A session waiting for its template's files (lullv1.ReasonFilesNotReady)
// is not broken: its Ready condition stays what its pod says.
//
// Of o, only Now, Session, Pod (nil: none, or not the session's) and
// ReportWrittenAt are read: a blocked reconcile has not read the
// StatefulSet or the template, so status.updateRevision stays as it was
// and the lifecycle is judged without a policy.
func BlockedStatus(o Observed, reason, msg string) (lullv1.SessionStatus, Action) {
	s, now := o.Session, o.Now
	o = Observed{Now: now, Session: s, Pod: o.Pod, ReportWrittenAt: o.ReportWrittenAt}
	retry := NextRetry(RefusedSince(s, reason, now), now)
	msg = fmt.Sprintf("%s; next try at %s", msg, retry.UTC().Format(time.RFC3339))
	a := Action{Kind: Block, Reason: reason, Message: msg, RequeueAfter: retry.Sub(now)}
	if c := s.Status.Replacement; c != nil && o.Pod != nil && c.PodUID == o.Pod.UID {
		a.Drain, a.Replacement = s.Status.Drain, c
	}
	st := NextStatus(o, Judge(o), a)
	st.UpdateRevision = s.Status.UpdateRevision
	newReason := !hasConditionReason(s, lullv1.ConditionUpToDate, reason)
	for _, typ := range []string{lullv1.ConditionReady, lullv1.ConditionUpToDate} {
		if reason == lullv1.ReasonFilesNotReady && typ == lullv1.ConditionReady {
			continue
		}
		status := metav1.ConditionFalse
		if typ == lullv1.ConditionUpToDate {
			status = metav1.ConditionUnknown
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status,
			Reason: reason, Message: msg, ObservedGeneration: s.Generation, LastTransitionTime: metav1.NewTime(now)})
		if newReason {
			// The backoff counts from when this problem began, even when
			// the condition's status stays False.
			meta.FindStatusCondition(st.Conditions, typ).LastTransitionTime = metav1.NewTime(now)
		}
	}
	return st, a
}

// NextRetry returns when a session blocked since since is tried next, seen
// at now: since + 5 s, + 10 s, + 20 s, … (each wait twice the last, at most
// 5 minutes), the first such time after now. It depends only on since and
// now, so a reconcile caused by the blocked status's own write computes the
// same time and writes nothing.
func NextRetry(since, now time.Time) time.Time {
	d, t := retryFirst, since.Add(retryFirst)
	for !t.After(now) {
		d = min(2*d, retryLimit)
		t = t.Add(d)
	}
	return t
}
