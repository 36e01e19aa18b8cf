package session

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// expectationTTL bounds how long a remembered write shadows the cache: long
// enough for any watch to deliver, short enough that a lost event heals.
const expectationTTL = 30 * time.Second

// expectations remembers keys of writes the cache may not show yet, in the
// manner of the StatefulSet controller's expectations. The zero value is
// ready to use.
type expectations struct {
	mu   sync.Mutex
	keys map[string]time.Time
}

func (e *expectations) add(key string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.keys == nil {
		e.keys = map[string]time.Time{}
	}
	for k, t := range e.keys {
		if now.Sub(t) > expectationTTL {
			delete(e.keys, k)
		}
	}
	e.keys[key] = now
}

func (e *expectations) has(key string, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.keys[key]
	return ok && now.Sub(t) <= expectationTTL
}

// passingStates remembers, per session, the passing state it is in and since
// when. A session's entry is dropped when the Session is gone (forget), and
// a Session of another UID that takes the name does not inherit it. The
// zero value is ready to use.
type passingStates struct {
	mu     sync.Mutex
	states map[string]passingState
}

type passingState struct {
	uid   types.UID
	state string
	since time.Time
}

// since returns when the session (its key, and its UID) entered state,
// recording now if it has just entered it.
func (p *passingStates) since(session string, uid types.UID, state string, now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.states == nil {
		p.states = map[string]passingState{}
	}
	if cur, ok := p.states[session]; ok && cur.uid == uid && cur.state == state {
		return cur.since
	}
	p.states[session] = passingState{uid: uid, state: state, since: now}
	return now
}

// forget drops a session's passing state.
func (p *passingStates) forget(session string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.states, session)
}
