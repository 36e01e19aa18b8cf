package devcluster

import (
	"context"
	"fmt"
	"time"
)

// pollInterval is how often readiness checks run.
const pollInterval = 50 * time.Millisecond

// waitReady polls check until it returns nil, the timeout passes, ctx ends,
// or p (if not nil) exits. The error carries check's last error.
func waitReady(parent context.Context, p *process, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	var last error
	for {
		if p != nil {
			if err := p.exitErr(); err != nil {
				return err
			}
		}
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if p != nil {
				if err := p.exitErr(); err != nil {
					return err
				}
			}
			if parent.Err() != nil {
				return fmt.Errorf("%w (last check: %v)", parent.Err(), last)
			}
			return fmt.Errorf("not ready after %s: %w", timeout, last)
		case <-p.doneOrNil():
		case <-t.C:
		}
	}
}

// doneOrNil returns p's done channel, or nil (blocks forever) for no process.
func (p *process) doneOrNil() <-chan struct{} {
	if p == nil {
		return nil
	}
	return p.done
}
