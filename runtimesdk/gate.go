package runtimesdk

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// ErrDraining is matched (errors.Is) by every error BeginTurn returns because
// the gate refuses turns: the session is draining, is drained and sealed, or
// has not yet published that it serves. The client should reconnect and
// retry: its next connection reaches the session's replacement pod, or this
// one once it serves again.
var ErrDraining = errors.New("session is draining: retry after reconnect")

// DrainingError is the error BeginTurn returns while the gate refuses turns.
// It matches ErrDraining.
type DrainingError struct {
	// State is the gate's state when the turn was refused. Serving means the
	// gate has not yet published Serving: the runtime is starting, or is
	// reopening after a withdrawn drain request.
	State lullv1.RuntimeState
	// RequestID and Reason describe the drain request being served, if any.
	RequestID string
	Reason    lullv1.DrainReason
	// Starting is true when the gate has never published Serving.
	Starting bool
	// Replacing is true when the session has committed to replacing this
	// runtime's pod (status.replacement names it).
	Replacing bool
}

func (e *DrainingError) Error() string {
	switch {
	case e.Replacing:
		return "session is moving to a new pod: retry after reconnect"
	case e.RequestID != "" && e.Reason == lullv1.DrainReasonIdle:
		// The attempt woke the session (see Gate.BeginTurn): this pod
		// serves again once the controller withdraws the request.
		return fmt.Sprintf("session is being suspended for inactivity (request %s); this attempt counts as activity: retry the turn in a moment", e.RequestID)
	case e.RequestID != "":
		return fmt.Sprintf("session is draining %s (request %s): retry after reconnect", reasonPhrase(e.Reason), e.RequestID)
	case e.Starting:
		return "session runtime is starting: retry after reconnect"
	default:
		return "session is reopening after a drain: retry after reconnect"
	}
}

// Is reports whether target is ErrDraining.
func (e *DrainingError) Is(target error) bool { return target == ErrDraining }

func reasonPhrase(r lullv1.DrainReason) string {
	switch r {
	case lullv1.DrainReasonUpdate:
		return "for an update"
	case lullv1.DrainReasonLifetime:
		return "because it reached its maximum lifetime"
	case lullv1.DrainReasonManual:
		return "on request"
	case lullv1.DrainReasonNodeDrain:
		return "because its node is being drained: it moves to another node"
	default:
		return "for a drain request"
	}
}

// Snapshot is the gate at one moment. It is also the drain state the agent
// serves as JSON.
type Snapshot struct {
	// State is what the runtime reports: Serving, Draining or Drained.
	State lullv1.RuntimeState `json:"state"`
	// RequestID is the drain request being served; empty while Serving.
	RequestID string `json:"requestID,omitempty"`
	// Reason is the reason of that request.
	Reason lullv1.DrainReason `json:"reason,omitempty"`
	// Accepting is true when BeginTurn would accept a turn: State is
	// Serving and Serving has been published since the gate last left it.
	Accepting bool `json:"accepting"`
	// ActiveTurns is the number of turns begun and neither ended nor expired.
	// It is never negative, and is 0 whenever State is Drained.
	ActiveTurns int `json:"activeTurns"`
	// LastActivity is when a turn last began or ended, a turn was refused
	// because of an Idle drain (see Gate.BeginTurn), or Bump was last
	// called; zero if never. Lease renewals and expiries are not activity.
	LastActivity time.Time `json:"lastActivity,omitzero"`
	// LapsedTurns is the number of active turns whose lease ran out and
	// that are in their grace: a Renew revives them; if none
	// comes, they expire when the grace ends. They count in ActiveTurns, so
	// the gate is not Drained while one is lapsed.
	LapsedTurns int `json:"lapsedTurns"`
	// ExpiredTurns counts the turns whose lease expired before they ended,
	// since the gate was made. It never decreases.
	ExpiredTurns int64 `json:"expiredTurns"`
	// Replacing is true while the session has committed to replacing this
	// runtime's pod: no turn is accepted, and the runtime's clients should
	// reconnect (to the pod that replaces it).
	Replacing bool `json:"replacing,omitempty"`
	// Deadline, while a drain request names a deadline, is when the pod is
	// replaced even if turns remain (or, under onDrainTimeout Wait, when
	// the drain is overdue): tell the user ("your session restarts for an
	// update in 4m30s"). Zero when there is none.
	Deadline time.Time `json:"deadline,omitzero"`
	// UpdatePending is true while the session's pod runs an older revision
	// than its update revision, drain or not: under the Passive strategy it
	// is the only sign of an update, and turns go on. A runtime may show a
	// notice ("a new version is available; restart to get it").
	UpdatePending bool `json:"updatePending,omitempty"`
	// UpdateRevision is the revision the session would move to, while
	// UpdatePending.
	UpdateRevision string `json:"updateRevision,omitempty"`
	// Seq increases with every change of the gate.
	Seq uint64 `json:"seq"`
}

// Notice is what the runtime is told about an update that blocks nothing:
// the deadline of the drain request for its pod, and whether its pod is
// stale. See Snapshot.
type Notice struct {
	Deadline       time.Time
	UpdatePending  bool
	UpdateRevision string
}

// SetNotice tells the gate the drain deadline and update status of its
// pod; they are shown in snapshots and change nothing else.
func (g *Gate) SetNotice(n Notice) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n == g.notice {
		return
	}
	g.notice = n
	g.changed()
}

// Gate is the turn gate of one runtime: it admits turns while the session
// serves, refuses them once a drain request for the runtime's pod arrives,
// and seals itself (Drained) when the last accepted turn ends. It does no
// I/O: the Session watch drives it with SetRequest, and the reporter tells it
// with Published what has been written to status.runtime. A Gate is safe for
// concurrent use.
//
// States (the drain protocol of the Kelos session runtime):
//
//	Serving  --request-->  Draining  --last turn ends-->  Drained (sealed)
//	Serving  --request, no turn active-->  Drained
//	Draining/Drained  --request withdrawn-->  Serving, refusing turns until
//	                                          Published(Serving)
//
// A leased turn whose lease runs out stays active for a grace in which a
// late Renew revives it, and keeps a draining gate Draining meanwhile (see TurnOptions.Lease), so
// a client that missed a renewal is not mistaken for one that finished.
//
// A gate that has left Serving refuses turns until the Serving report has
// been published again, so a Drained report on the API server is never
// contradicted by a turn in flight. A new gate likewise refuses turns until
// its first Serving report is published: a runtime restarted in the same pod
// must not accept work while a Drained report of that pod may still stand.
type Gate struct {
	clock        clock.WithDelayedExecution // times activity and leases
	mu           sync.Mutex
	state        lullv1.RuntimeState
	requestID    string
	reason       lullv1.DrainReason
	sealed       bool // refuses turns until Published(Serving)
	held         bool // the pod is committed for replacement: refuses turns, whatever is published
	notice       Notice
	everServed   bool // Serving has been published at least once
	published    bool // a report has been published
	active       map[*Turn]struct{}
	lastActivity time.Time
	expired      int64
	seq          uint64
	subs         map[chan Snapshot]struct{}
}

// NewGate returns a gate in state Serving that refuses turns until
// Published(lullv1.RuntimeServing) is called. It reads the real clock; a
// Runtime's gate reads Config.Clock.
func NewGate() *Gate { return newGate(clock.RealClock{}) }

// newGate is NewGate reading the time from clk.
func newGate(clk clock.WithDelayedExecution) *Gate {
	return &Gate{
		clock:  clk,
		state:  lullv1.RuntimeServing,
		sealed: true,
		active: make(map[*Turn]struct{}),
		subs:   make(map[chan Snapshot]struct{}),
	}
}

// BeginTurn admits a turn, or returns a *DrainingError (errors.Is
// ErrDraining) when the gate refuses turns, or an error for invalid opts.
// The caller must End the turn; a turn with a lease that is not renewed in
// time ends by itself.
//
// A turn refused because of an Idle drain request (the session is being
// culled for inactivity, and its pod is not yet committed for replacement)
// is real user activity all the same: it is recorded as LastActivity, as
// Bump does, and reported at once, so the controller withdraws the request
// and the gate reopens. The caller gets the DrainingError and retries.
func (g *Gate) BeginTurn(opts TurnOptions) (*Turn, error) {
	if opts.Lease < 0 {
		return nil, fmt.Errorf("turn lease %s is negative", opts.Lease)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.accepting() {
		if g.requestID != "" && g.reason == lullv1.DrainReasonIdle && !g.held {
			g.lastActivity = g.clock.Now()
			g.changed()
		}
		return nil, &DrainingError{State: g.state, RequestID: g.requestID, Reason: g.reason, Starting: !g.everServed, Replacing: g.held}
	}
	now := g.clock.Now()
	t := &Turn{gate: g, id: newTurnID(), lease: opts.Lease, begun: now}
	if opts.Lease > 0 {
		t.deadline = now.Add(opts.Lease)
		t.checkLeaseIn(opts.Lease)
	}
	g.active[t] = struct{}{}
	g.lastActivity = now
	g.changed()
	return t, nil
}

// Bump records activity that is not a turn (a user typing, a cell edited),
// so an idle drain does not take a session in use; during an Idle drain it
// is reported at once. Health and readiness probes, and reads of the
// gate's state, must not call it.
func (g *Gate) Bump() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lastActivity = g.clock.Now()
	g.changed()
}

// SetRequest tells the gate the drain request for its pod: id and reason of
// the request in status.drain, or an empty id when there is none (or it was
// withdrawn). The caller has already checked that the request names this
// runtime's pod UID.
func (g *Gate) SetRequest(id string, reason lullv1.DrainReason) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if id == g.requestID && (id == "" || reason == g.reason) {
		return
	}
	g.requestID, g.reason = id, reason
	if id == "" {
		g.reason = ""
		g.state = lullv1.RuntimeServing // sealed until Published(Serving)
	} else {
		g.sealed = true
		g.state = lullv1.RuntimeDraining
		g.settle()
	}
	g.changed()
}

// SetHeld tells the gate whether the session has committed to replacing its
// pod (status.replacement names the pod). While held, the gate refuses
// turns and does not reopen, whatever is published: the controller may be
// deleting the pod. A hold lifted (a failure commitment that lapsed because
// the pod recovered) leaves the gate sealed until Serving is published
// again.
func (g *Gate) SetHeld(held bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if held == g.held {
		return
	}
	g.held = held
	g.sealed = true
	g.changed()
}

// Opening reports whether a Serving report written now would open the gate:
// the gate is sealed in state Serving and not held. Such a write is made
// with a precondition on the Session version the runtime last saw, so it
// cannot land after a change the runtime has not seen (a replacement
// committed, a new drain request).
func (g *Gate) Opening() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state == lullv1.RuntimeServing && g.sealed && !g.held
}

// Published tells the gate that a report of state s has been written to
// status.runtime, and that no other write is in flight. Published(Serving)
// while the gate's state is Serving reopens the gate.
func (g *Gate) Published(s lullv1.RuntimeState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.published = true
	if s != lullv1.RuntimeServing || g.state != lullv1.RuntimeServing || !g.sealed || g.held {
		return
	}
	g.sealed, g.everServed = false, true
	g.changed()
}

// Snapshot returns the gate's current state.
func (g *Gate) Snapshot() Snapshot {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.snapshot()
}

// Subscribe returns a channel that receives the current snapshot at once and
// then one after each change. It coalesces: a slow reader sees only the
// latest snapshot, never a stale one after a newer. cancel stops delivery
// and closes the channel; it may be called more than once.
func (g *Gate) Subscribe() (snapshots <-chan Snapshot, cancel func()) {
	ch := make(chan Snapshot, 1)
	g.mu.Lock()
	g.subs[ch] = struct{}{}
	ch <- g.snapshot()
	g.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			g.mu.Lock()
			delete(g.subs, ch)
			close(ch)
			g.mu.Unlock()
		})
	}
}

// accepting reports whether a turn may begin. g.mu is held.
func (g *Gate) accepting() bool {
	return g.state == lullv1.RuntimeServing && !g.sealed && !g.held
}

// settle moves Draining to Drained once no turn is active. g.mu is held.
func (g *Gate) settle() {
	if g.state == lullv1.RuntimeDraining && len(g.active) == 0 {
		g.state = lullv1.RuntimeDrained
	}
}

// endTurn removes t from the active turns; expired says its lease ran out.
// g.mu is held.
func (g *Gate) endTurn(t *Turn, expired bool) {
	if t.done {
		return
	}
	t.done, t.expired = true, expired
	if t.timer != nil {
		t.timer.Stop()
	}
	delete(g.active, t)
	if expired {
		g.expired++
	} else {
		g.lastActivity = g.clock.Now()
	}
	g.settle()
	g.changed()
}

// changed notifies subscribers of a new snapshot. g.mu is held. Each
// channel has room for one snapshot and only changed sends on it, so
// replacing an unread snapshot never blocks.
func (g *Gate) changed() {
	g.seq++
	s := g.snapshot()
	for ch := range g.subs {
		select {
		case <-ch:
		default:
		}
		ch <- s
	}
}

func (g *Gate) snapshot() Snapshot {
	lapsed := 0
	for t := range g.active {
		if !t.graceUntil.IsZero() {
			lapsed++
		}
	}
	return Snapshot{
		State:        g.state,
		RequestID:    g.requestID,
		Reason:       g.reason,
		Accepting:    g.accepting(),
		Replacing:    g.held,
		ActiveTurns:  len(g.active),
		LapsedTurns:  lapsed,
		LastActivity: g.lastActivity,
		ExpiredTurns: g.expired,
		Seq:          g.seq,

		Deadline:       g.notice.Deadline,
		UpdatePending:  g.notice.UpdatePending,
		UpdateRevision: g.notice.UpdateRevision,
	}
}
