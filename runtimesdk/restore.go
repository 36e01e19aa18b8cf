package runtimesdk

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TurnRecord is a turn as whoever began it persists it, so that a new
// process can restore it with Restore: a `lull agent` restarted in its pod
// while the runtime in the other container still holds the turn.
type TurnRecord struct {
	// ID is the turn's ID, "t-" and 16 hex characters (Turn.ID).
	ID string
	// Lease is the turn's lease (TurnOptions.Lease); zero for none.
	Lease time.Duration
	// LeaseDeadline is when the lease runs out unless renewed; zero exactly
	// when Lease is zero.
	LeaseDeadline time.Time
	// Begun is when the turn began.
	Begun time.Time
}

// validate returns an error naming what is wrong with r.
func (r TurnRecord) validate() error {
	switch {
	case !validTurnID(r.ID):
		return fmt.Errorf("turn ID %q: want t- and 16 hex characters", r.ID)
	case r.Lease < 0:
		return fmt.Errorf("turn %s: lease %s is negative", r.ID, r.Lease)
	case r.Lease > 0 && r.LeaseDeadline.IsZero():
		return fmt.Errorf("turn %s: lease %s without a deadline", r.ID, r.Lease)
	case r.Lease == 0 && !r.LeaseDeadline.IsZero():
		return fmt.Errorf("turn %s: lease deadline without a lease", r.ID)
	case r.Begun.IsZero():
		return fmt.Errorf("turn %s: begun time is zero", r.ID)
	}
	return nil
}

func validTurnID(id string) bool {
	digits, ok := strings.CutPrefix(id, "t-")
	if !ok || len(digits) != 16 || strings.ToLower(digits) != digits {
		return false
	}
	_, err := hex.DecodeString(digits)
	return err == nil
}

// Record returns the turn as its holder persists it. A turn ended or
// expired is recorded as it was when it stopped.
func (t *Turn) Record() TurnRecord {
	t.gate.mu.Lock()
	defer t.gate.mu.Unlock()
	return TurnRecord{ID: t.id, Lease: t.lease, LeaseDeadline: t.deadline, Begun: t.begun}
}

// Restore makes the recorded turns active in the gate and returns them in
// the order of records. It must be called before the runtime's first
// report (before Run), so a restarted runtime never reports fewer turns
// than its clients hold: it returns an error once a report has been
// published or while the gate is Drained, and for a record that is
// malformed or whose ID is already active; then it restores nothing.
//
// A restored turn keeps its ID, its begin time (LastActivity becomes the
// latest of them, if later) and its lease. Without a lease it is active
// until End. A leased turn whose deadline is ahead runs to it like any
// turn. A leased turn whose deadline has passed (the lease ran out while no
// process held it) is lapsed, with a grace of one lease counted from now,
// whatever the gate's state: its client may have been unable to renew only
// because nothing was listening.
func (g *Gate) Restore(records []TurnRecord) ([]*Turn, error) {
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.published:
		return nil, errors.New("restore turns: a report has been published; turns are restored only before the first")
	case g.state == lullv1.RuntimeDrained:
		return nil, errors.New("restore turns: the gate is Drained")
	}
	seen := make(map[string]bool, len(g.active)+len(records))
	for t := range g.active {
		seen[t.id] = true
	}
	var errs []error
	for _, r := range records {
		if err := r.validate(); err != nil {
			errs = append(errs, err)
		} else if seen[r.ID] {
			errs = append(errs, fmt.Errorf("turn %s: restored twice", r.ID))
		}
		seen[r.ID] = true
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("restore turns: %w", err)
	}
	turns := make([]*Turn, len(records))
	for i, r := range records {
		t := &Turn{gate: g, id: r.ID, lease: r.Lease, begun: r.Begun, deadline: r.LeaseDeadline}
		if r.Lease > 0 {
			wait := r.LeaseDeadline.Sub(now)
			if wait <= 0 {
				t.graceUntil, wait = now.Add(r.Lease), r.Lease
			}
			t.checkLeaseIn(wait)
		}
		g.active[t] = struct{}{}
		if r.Begun.After(g.lastActivity) {
			g.lastActivity = r.Begun
		}
		turns[i] = t
	}
	g.changed()
	return turns, nil
}
