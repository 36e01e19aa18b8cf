package rollout

import "time"

// Soonest returns the soonest of waits that is not zero, 0 when every one
// is: the look-again of a reconcile with several reasons to look again
// (Action.RequeueAfter, a lifecycle judgement's NextCheck, a settle delay,
// a blocked schedule), where 0 asks for none, as in ctrl.Result's
// RequeueAfter. A negative wait, a time already past, is the soonest of
// all.
func Soonest(waits ...time.Duration) time.Duration {
	var soonest time.Duration
	for _, w := range waits {
		if w != 0 && (soonest == 0 || w < soonest) {
			soonest = w
		}
	}
	return soonest
}
