package turnrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// agentGate takes turns through the lull agent's HTTP API on its unix
// socket (see `lull agent --help`): what a runtime written in any language
// does. It holds no Kubernetes credentials.
type agentGate struct {
	c *http.Client
}

func newAgentGate(socket string) *agentGate {
	return &agentGate{c: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}}
}

// run waits for the agent to answer (a native sidecar starts first, but its
// socket may not be up yet), then serves until ctx is done: the agent, not
// this process, reports to the API server.
func (g *agentGate) run(ctx context.Context) error {
	for {
		if _, err := g.do(ctx, http.MethodGet, "/healthz", nil); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	<-ctx.Done()
	return nil
}

func (g *agentGate) begin(ctx context.Context) (func() error, error) {
	for {
		b, err := g.do(ctx, http.MethodPost, "/v1/turns", nil)
		var refused errStatus
		switch {
		case errors.As(err, &refused) && refused.code == http.StatusServiceUnavailable:
			return nil, errDraining
		case err != nil && ctx.Err() == nil && !errors.As(err, &refused):
			// The agent is not up yet, or restarting: try again.
			time.Sleep(200 * time.Millisecond)
			continue
		case err != nil:
			return nil, err
		}
		var turn struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(b, &turn); err != nil || turn.ID == "" {
			return nil, fmt.Errorf("agent answered POST /v1/turns with %q", b)
		}
		return func() error {
			_, err := g.do(context.Background(), http.MethodDelete, "/v1/turns/"+turn.ID, nil)
			return err
		}, nil
	}
}

func (g *agentGate) waitAccepting(ctx context.Context) bool {
	for {
		b, err := g.do(ctx, http.MethodGet, "/v1/drain", nil)
		var st struct {
			Accepting bool `json:"accepting"`
		}
		if err == nil && json.Unmarshal(b, &st) == nil && st.Accepting {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// notices polls the agent's drain state (GET /v1/drain) every half second;
// a runtime that wants changes at once reads GET /v1/drain/stream.
func (g *agentGate) notices(ctx context.Context) <-chan notice {
	return dedupNotices(ctx, func(ctx context.Context) (notice, bool) {
		for {
			select {
			case <-ctx.Done():
				return notice{}, false
			case <-time.After(500 * time.Millisecond):
			}
			b, err := g.do(ctx, http.MethodGet, "/v1/drain", nil)
			var st struct {
				Deadline      time.Time `json:"deadline"`
				UpdatePending bool      `json:"updatePending"`
			}
			if err == nil && json.Unmarshal(b, &st) == nil {
				return notice{deadline: st.Deadline, updatePending: st.UpdatePending}, true
			}
		}
	})
}

// errStatus is an answer other than 2xx.
type errStatus struct {
	code int
	body string
}

func (e errStatus) Error() string { return fmt.Sprintf("agent answered %d: %s", e.code, e.body) }

func (g *agentGate) do(ctx context.Context, method, path string, body io.Reader) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, body)
	if err != nil {
		return nil, err
	}
	resp, err := g.c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, errStatus{code: resp.StatusCode, body: string(b)}
	}
	return b, nil
}
