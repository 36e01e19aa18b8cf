package testenv

import (
	"errors"
	"testing"
	"time"
)

// recorder is a testing.TB that records a failure instead of ending the
// test, so Eventually's failure can be checked.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
	// Eventually must not go on after Fatalf; a real TB exits the
	// goroutine, so this one does too.
	panic(r)
}

func run(t *testing.T, timeout time.Duration, cond func() error) (failed bool) {
	r := &recorder{TB: t}
	defer func() {
		if p := recover(); p != nil {
			if p != r {
				panic(p)
			}
			failed = true
		}
	}()
	Eventually(r, timeout, "cond", cond)
	return false
}

func TestEventually(t *testing.T) {
	calls := 0
	if run(t, 5*time.Second, func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}) {
		t.Error("failed for a condition that holds on the third call")
	}
	if calls != 3 {
		t.Errorf("cond called %d times, want 3 (until it held, then no more)", calls)
	}
	start := time.Now()
	if !run(t, 200*time.Millisecond, func() error { return errors.New("never") }) {
		t.Error("passed for a condition that never holds")
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 5*time.Second {
		t.Errorf("gave up after %s, want the timeout 200ms", d)
	}
}

func TestSchemeKnowsCoreAndLullTypes(t *testing.T) {
	s := Scheme()
	for _, kind := range []string{"Pod", "StatefulSet", "ConfigMap", "RoleBinding", "Session", "SessionTemplate", "RuntimeCatalog"} {
		found := false
		for gvk := range s.AllKnownTypes() {
			found = found || gvk.Kind == kind
		}
		if !found {
			t.Errorf("Scheme has no kind %s", kind)
		}
	}
}
