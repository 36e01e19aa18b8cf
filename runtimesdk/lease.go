package runtimesdk

import "time"

// leaseState is where a leased turn stands at one moment.
type leaseState int

const (
	// leaseLive: the deadline is ahead.
	leaseLive leaseState = iota
	// leaseLapsed: the deadline has passed and the grace has not: the turn
	// still counts as active, and a Renew revives it.
	leaseLapsed
	// leaseExpired: the turn ends, counted as expired.
	leaseExpired
)

// leaseFate decides what becomes of a leased turn at now. deadline is when
// its lease runs out; graceUntil is the end of a grace it already has (zero
// if none); lease is the turn's lease, which is also the length of its
// grace. It returns the turn's state and, for leaseLapsed, when its grace
// ends.
//
// A lease that runs out is not taken as a finished turn at once: a client
// that missed its renewal (a GC pause, CPU throttling) may still be
// working, and expiring its turn could let the gate settle to Drained and
// the pod be deleted under that work. The turn stays active for a grace,
// counted from its deadline, during which a late Renew revives it. The
// grace is the turn's own lease: a client that chose a lease of L declared
// it may go silent for L, so a stall of up to one more L is tolerated, and a
// crashed client holds a drain for at most 2L. The grace does not depend on
// whether a drain is outstanding when the deadline passes: a request that
// arrives a moment after the deadline must find the stalled turn as one
// arriving a moment before would.
func leaseFate(deadline, graceUntil, now time.Time, lease time.Duration) (leaseState, time.Time) {
	switch {
	case now.Before(deadline):
		return leaseLive, time.Time{}
	case !graceUntil.IsZero():
		if now.Before(graceUntil) {
			return leaseLapsed, graceUntil
		}
		return leaseExpired, time.Time{}
	case now.Before(deadline.Add(lease)):
		return leaseLapsed, deadline.Add(lease)
	default:
		return leaseExpired, time.Time{}
	}
}
