// Package testenv holds the helpers that tests in several of lull's
// packages share: Eventually and EventuallyContext, which poll a
// condition until it holds or fail the test, and Scheme, the types lull's
// controllers read, for fake clients. Only tests import it (the direction
// test in internal/dev keeps it out of every production binary).
package testenv

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// PollInterval is how often Eventually and EventuallyContext call their
// condition.
const PollInterval = 50 * time.Millisecond

// Eventually calls cond every PollInterval until it returns nil. If
// timeout passes first, it fails the test (t.Fatalf, so call it from the
// test's goroutine) with what and cond's last error.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	EventuallyContext(t, timeout, what, func(context.Context) error { return cond() })
}

// EventuallyContext is Eventually for a condition that calls the API
// server: cond gets the test's context, cancelled when timeout passes, so
// a call that hangs ends with the wait.
func EventuallyContext(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		err := cond(ctx)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		case <-tick.C:
		}
	}
}

// Scheme returns a new scheme of the types lull's controllers read: the
// Kubernetes built-ins (client-go's scheme) and lull.dev/v1alpha1. It
// holds the same types as manager.Scheme, which tests of the packages the
// manager wires cannot import (an import cycle); TestSchemeIsTheManagers
// in internal/manager keeps the two the same.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := lullv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}
