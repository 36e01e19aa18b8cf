package session

import (
	"sync"
	"time"
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

func (e *expectations) has(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.keys[key]
	return ok && time.Since(t) <= expectationTTL
}
