package runtime

import "time"

// leaseState is where a leased turn stands at one moment.
type leaseState int

const (
	// leaseLive: the deadline is ahead.
	leaseLive leaseState = iota
	// leaseLapsed: the deadline has passed during a drain and the grace has
	// not: the turn still counts as active, and a Renew revives it.
	leaseLapsed
	// leaseExpired: the turn ends, counted as expired.
	leaseExpired
)

// leaseFate decides what becomes of a leased turn at now. deadline is when
// its lease runs out; graceUntil is the end of a grace it already has (zero
// if none); draining says whether the gate is Draining; lease is the turn's
// lease, which is also the length of its grace. It returns the turn's state
// and, for leaseLapsed, when its grace ends.
//
// A lease that runs out during a drain is not taken as a finished turn at
// once: a client that missed its renewal (a GC pause, CPU throttling) may
// still be working, and expiring its turn could let the gate settle to
// Drained and the pod be deleted under that work. The turn keeps the drain
// open for a grace, counted from its deadline, during which a late Renew
// revives it. The grace is the turn's own lease: a client that chose a
// lease of L declared it may go silent for L, so a stall of up to one more
// L is tolerated, and a crashed client holds a drain for at most 2L.
// Outside a drain an expiry takes nothing from anyone, and the turn ends at
// its deadline. A grace once given runs to its end, even if the drain
// request is withdrawn meanwhile.
func leaseFate(deadline, graceUntil, now time.Time, draining bool, lease time.Duration) (leaseState, time.Time) {
	switch {
	case now.Before(deadline):
		return leaseLive, time.Time{}
	case !graceUntil.IsZero():
		if now.Before(graceUntil) {
			return leaseLapsed, graceUntil
		}
		return leaseExpired, time.Time{}
	case draining && now.Before(deadline.Add(lease)):
		return leaseLapsed, deadline.Add(lease)
	default:
		return leaseExpired, time.Time{}
	}
}
