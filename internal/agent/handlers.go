package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/runtimesdk"
)

// maxBody bounds request bodies: the largest is {"lease":"…"}.
const maxBody = 4 << 10

// streamHeartbeat is how often an idle drain stream sends an SSE comment,
// so a client or proxy notices a dead connection.
const streamHeartbeat = 15 * time.Second

// routes returns the agent's HTTP API.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/turns", s.beginTurn)
	mux.HandleFunc("DELETE /v1/turns/{id}", s.endTurn)
	mux.HandleFunc("POST /v1/turns/{id}/renew", s.renewTurn)
	mux.HandleFunc("GET /v1/drain", s.drainState)
	mux.HandleFunc("GET /v1/drain/stream", s.drainStream)
	mux.HandleFunc("POST /v1/activity", s.activity)
	mux.HandleFunc("GET /healthz", healthz)
	return mux
}

// turnRequest is the optional body of POST /v1/turns.
type turnRequest struct {
	// Lease is a Go duration ("30s", "2m"); empty means no lease.
	Lease string `json:"lease"`
}

// turnResponse describes a turn: its ID and, for a leased turn, when the
// lease runs out unless renewed.
type turnResponse struct {
	ID             string    `json:"id"`
	LeaseExpiresAt time.Time `json:"leaseExpiresAt,omitzero"`
}

// errorResponse is the body of every error.
type errorResponse struct {
	// Error is a machine-readable code: bad_request, not_found, expired,
	// draining, state_file.
	Error   string `json:"error"`
	Message string `json:"message"`
	// State and RequestID, for draining: the runtime's state and the drain
	// request it serves.
	State     lullv1.RuntimeState `json:"state,omitempty"`
	RequestID string              `json:"requestID,omitempty"`
}

// beginTurn: POST /v1/turns, body optional {"lease":"30s"}. 201 with the
// turn, once it is in the state file; 503 with Retry-After while the
// session drains (during an Idle drain the attempt is recorded as activity:
// see runtimesdk.Gate.BeginTurn); 400 on a bad body; 500 if the state file
// cannot be written (the turn is not begun).
func (s *Server) beginTurn(w http.ResponseWriter, r *http.Request) {
	var req turnRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, errorResponse{Error: "bad_request", Message: "body: " + err.Error()})
		return
	}
	var opts runtimesdk.TurnOptions
	if req.Lease != "" {
		d, err := time.ParseDuration(req.Lease)
		if err != nil || d <= 0 {
			writeError(w, http.StatusBadRequest, errorResponse{Error: "bad_request",
				Message: fmt.Sprintf("lease %q: want a positive duration such as \"30s\"", req.Lease)})
			return
		}
		opts.Lease = d
	}
	turn, err := s.gate.BeginTurn(opts)
	var refused *runtimesdk.DrainingError
	switch {
	case errors.As(err, &refused):
		retry := 5 // the session is being replaced: reconnect to its new pod
		if refused.State == lullv1.RuntimeServing ||
			(refused.Reason == lullv1.DrainReasonIdle && !refused.Replacing) {
			// Starting or reopening, or an Idle drain this attempt has
			// just woken: this pod serves again shortly.
			retry = 1
		}
		w.Header().Set("Retry-After", strconv.Itoa(retry))
		writeError(w, http.StatusServiceUnavailable, errorResponse{Error: "draining", Message: err.Error(),
			State: refused.State, RequestID: refused.RequestID})
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, errorResponse{Error: "bad_request", Message: err.Error()})
		return
	}
	if err := s.addTurn(turn); err != nil {
		turn.End()
		s.log.Error("recording a turn in the agent state file failed; the turn is refused", "file", s.stateFile, "err", err)
		writeError(w, http.StatusInternalServerError, errorResponse{Error: "state_file",
			Message: fmt.Sprintf("turn not begun: recording it in %s failed: %v", s.stateFile, err)})
		return
	}
	w.Header().Set("Location", "/v1/turns/"+turn.ID())
	writeJSON(w, http.StatusCreated, turnResponse{ID: turn.ID(), LeaseExpiresAt: turn.ExpiresAt()})
}

// endTurn: DELETE /v1/turns/{id}. 204 once the end is in the state file;
// 404 if the turn is unknown, already ended or expired; 500 state_file if
// the end could not be recorded (the turn stays active: retry).
func (s *Server) endTurn(w http.ResponseWriter, r *http.Request) {
	turn, ok := s.lookupTurn(w, r)
	if !ok {
		return
	}
	if err := s.finishTurn(turn); err != nil {
		s.log.Error("writing the agent state file failed; the turn is not ended", "file", s.stateFile, "turn", turn.ID(), "err", err)
		writeError(w, http.StatusInternalServerError, errorResponse{Error: "state_file",
			Message: fmt.Sprintf("turn %s not ended: the agent could not record its end (%v); retry", turn.ID(), err)})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// renewTurn: POST /v1/turns/{id}/renew. 200 with the new expiry, once it
// is in the state file (a lapsed turn in its grace is revived); 404 if the
// turn is unknown, ended or expired.
func (s *Server) renewTurn(w http.ResponseWriter, r *http.Request) {
	turn, ok := s.lookupTurn(w, r)
	if !ok {
		return
	}
	exp, err := turn.Renew()
	if err != nil {
		s.saveTurns(turn.ID(), "expire")
		writeTurnGone(w, turn.ID(), err)
		return
	}
	s.saveTurns(turn.ID(), "renew")
	writeJSON(w, http.StatusOK, turnResponse{ID: turn.ID(), LeaseExpiresAt: exp})
}

// lookupTurn looks up the turn named in the path; it writes the 404 and
// returns false for a turn that is unknown or no longer active.
func (s *Server) lookupTurn(w http.ResponseWriter, r *http.Request) (*runtimesdk.Turn, bool) {
	id := r.PathValue("id")
	turn := s.turn(id)
	if turn == nil {
		writeError(w, http.StatusNotFound, errorResponse{Error: "not_found", Message: fmt.Sprintf("turn %q is unknown or has ended", id)})
		return nil, false
	}
	if err := turn.Err(); err != nil {
		s.saveTurns(id, "expire")
		writeTurnGone(w, id, err)
		return nil, false
	}
	return turn, true
}

func writeTurnGone(w http.ResponseWriter, id string, err error) {
	code := "not_found"
	if errors.Is(err, runtimesdk.ErrLeaseExpired) {
		code = "expired"
	}
	writeError(w, http.StatusNotFound, errorResponse{Error: code, Message: fmt.Sprintf("turn %s: %v", id, err)})
}

// drainState: GET /v1/drain, the runtime's snapshot.
func (s *Server) drainState(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.gate.Snapshot())
}

// drainStream: GET /v1/drain/stream, Server-Sent Events: one
// "data: <snapshot JSON>" event at once and one per change after (a slow
// reader gets the latest), plus a comment line every 15s while idle.
func (s *Server) drainStream(w http.ResponseWriter, r *http.Request) {
	snapshots, cancel := s.gate.Subscribe()
	defer cancel()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	heartbeat := time.NewTicker(streamHeartbeat)
	defer heartbeat.Stop()
	for {
		var err error
		select {
		case <-r.Context().Done():
			return
		case <-heartbeat.C:
			_, err = io.WriteString(w, ": heartbeat\n\n")
		case snap := <-snapshots:
			var b []byte
			if b, err = json.Marshal(snap); err == nil {
				_, err = fmt.Fprintf(w, "data: %s\n\n", b)
			}
		}
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// activity: POST /v1/activity records activity that is not a turn.
func (s *Server) activity(w http.ResponseWriter, _ *http.Request) {
	s.gate.Bump()
	w.WriteHeader(http.StatusNoContent)
}

// healthz: GET /healthz, for liveness probes. It records no activity.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok\n") //nolint:errcheck // the client is gone
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // the client is gone
}

func writeError(w http.ResponseWriter, status int, e errorResponse) {
	writeJSON(w, status, e)
}
