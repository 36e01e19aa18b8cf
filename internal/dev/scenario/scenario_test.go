package scenario

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"lull.dev/lull/internal/manager"
)

func never(Fleet) bool { return false }

func TestWaitForTellsInterruptionFromTimeout(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(manager.Scheme()).Build()
	names := []string{"a", "b"}

	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := WaitFor(ctx, c, "ns", names, 10*time.Millisecond, 5*time.Minute, nil, never)
	if !errors.Is(err, ErrInterrupted) || !strings.HasPrefix(err.Error(), "interrupted with 0 of 2 sessions current") || strings.Contains(err.Error(), "5m0s") {
		t.Errorf("canceled: %v", err)
	}
	if got := Interrupted(ctx, errors.New("create session a: context canceled")); got != ErrInterrupted {
		t.Errorf("Interrupted after cancel: %v", got)
	}
	if err := Sleep(ctx, time.Hour); !errors.Is(err, ErrInterrupted) {
		t.Errorf("Sleep after cancel: %v", err)
	}

	_, err = WaitFor(t.Context(), c, "ns", names, 10*time.Millisecond, 50*time.Millisecond, nil, never)
	if errors.Is(err, ErrInterrupted) || !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "after 50ms: 0 of 2 sessions current") {
		t.Errorf("timed out: %v", err)
	}
	other := errors.New("boom")
	if got := Interrupted(t.Context(), other); got != other {
		t.Errorf("Interrupted without cancel: %v", got)
	}
}
