package runtimesdk

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"k8s.io/utils/clock"
)

// TurnOptions configure one turn.
type TurnOptions struct {
	// Lease, when positive, bounds how long the turn lives without a Renew:
	// a turn not renewed within Lease of its start or last renewal expires
	// and counts as ended, so a crashed client cannot hold a drain open
	// forever. A lapsed lease gets a grace of one more Lease in which a late
	// Renew revives the turn (see Snapshot.LapsedTurns), during a drain or
	// not.
	// Zero means no lease: the turn lives until End. Negative is an error.
	Lease time.Duration
}

// ErrTurnEnded is returned by Renew on a turn that was ended.
var ErrTurnEnded = errors.New("turn has ended")

// ErrLeaseExpired is returned by Renew on a turn whose lease expired.
var ErrLeaseExpired = errors.New("turn lease expired")

// Turn is one accepted unit of work: an agent turn, a running cell, a build.
// Its methods are safe for concurrent use.
type Turn struct {
	gate  *Gate
	id    string
	lease time.Duration
	begun time.Time

	// Guarded by gate.mu.
	deadline   time.Time   // zero without a lease
	graceUntil time.Time   // end of the grace of a lapsed lease; zero if none
	timer      clock.Timer // calls checkLease; nil without a lease
	done       bool
	expired    bool
}

// ID returns the turn's ID: "t-" and 16 hex characters, unique within the
// process.
func (t *Turn) ID() string { return t.id }

// End ends the turn. Ending an ended or expired turn does nothing.
func (t *Turn) End() {
	t.gate.mu.Lock()
	defer t.gate.mu.Unlock()
	t.gate.endTurn(t, false)
}

// Renew extends a leased turn's lease to Lease from now and returns the new
// expiry. A turn whose lease lapsed and is in its grace is revived: it is active again with a full lease. Renew returns
// ErrLeaseExpired if the lease has run out beyond any grace (even if the
// gate has not yet noticed) and ErrTurnEnded if the turn was ended. For a
// turn without a lease it returns the zero time and nil.
func (t *Turn) Renew() (time.Time, error) {
	g := t.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := t.errLocked(); err != nil {
		return time.Time{}, err
	}
	if t.lease == 0 {
		return time.Time{}, nil
	}
	now := g.clock.Now()
	if state, _ := leaseFate(t.deadline, t.graceUntil, now, t.lease); state == leaseExpired {
		g.endTurn(t, true)
		return time.Time{}, ErrLeaseExpired
	}
	revived := !t.graceUntil.IsZero()
	t.deadline, t.graceUntil = now.Add(t.lease), time.Time{}
	t.checkLeaseIn(t.lease)
	if revived {
		g.changed()
	}
	return t.deadline, nil
}

// ExpiresAt returns when the turn's lease runs out, or the zero time for a
// turn without a lease.
func (t *Turn) ExpiresAt() time.Time {
	t.gate.mu.Lock()
	defer t.gate.mu.Unlock()
	return t.deadline
}

// Err returns nil while the turn is active, ErrLeaseExpired once its lease
// has expired, and ErrTurnEnded once it was ended.
func (t *Turn) Err() error {
	t.gate.mu.Lock()
	defer t.gate.mu.Unlock()
	return t.errLocked()
}

func (t *Turn) errLocked() error {
	switch {
	case t.expired:
		return ErrLeaseExpired
	case t.done:
		return ErrTurnEnded
	}
	return nil
}

// checkLease runs when the lease timer fires: unless a Renew moved the
// deadline, it gives the turn its grace and sets the timer
// to the grace's end, or expires the turn.
func (t *Turn) checkLease() {
	g := t.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.done {
		return
	}
	now := g.clock.Now()
	switch state, graceUntil := leaseFate(t.deadline, t.graceUntil, now, t.lease); state {
	case leaseLapsed:
		if t.graceUntil.IsZero() {
			t.graceUntil = graceUntil
			g.changed()
		}
		t.checkLeaseIn(graceUntil.Sub(now))
	case leaseExpired:
		g.endTurn(t, true)
	}
}

// checkLeaseIn makes checkLease run d from now on the gate's clock, in a
// goroutine of its own, in place of any earlier call not yet made.
// gate.mu is held.
//
// The timer's callback starts checkLease rather than being it, and each
// call arms a new timer rather than resetting the last one, for the fake
// clock of k8s.io/utils/clock/testing: it calls an AfterFunc callback
// from its Step with its own lock held, where checkLease (which reads the
// clock and arms a timer) would wait for that lock for ever; and an
// AfterFunc timer of it that has fired and is reset blocks its Step when
// it fires again (its channel, which no one reads, is full).
func (t *Turn) checkLeaseIn(d time.Duration) {
	if t.timer != nil {
		t.timer.Stop()
	}
	t.timer = t.gate.clock.AfterFunc(d, func() { go t.checkLease() })
}

func newTurnID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	return "t-" + hex.EncodeToString(b[:])
}
