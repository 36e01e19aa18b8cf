package devcluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

const (
	// pollInterval is how often readiness checks run.
	pollInterval = 50 * time.Millisecond
	// readyTimeout bounds each component's startup.
	readyTimeout = 60 * time.Second
)

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
		last = checkOnce(ctx, p, check)
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

// checkOnce runs one check, abandoned after a few seconds or as soon as p
// exits (the port may belong to another server that never answers).
func checkOnce(ctx context.Context, p *process, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	go func() {
		select {
		case <-p.doneOrNil():
			cancel()
		case <-ctx.Done():
		}
	}()
	return check(ctx)
}

// httpGet returns the body of a 200 response.
func httpGet(ctx context.Context, hc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body), nil
}
