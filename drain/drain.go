// Package drain holds the wire rules of the drain protocol that the
// controller and a session's runtime share: how a drain request is
// identified, what a runtime report looks like on the wire, and when a
// report answers a request.
//
// The protocol follows the Kelos session-runtime drain: the controller writes
// status.drain, the runtime answers in status.runtime, and the controller
// deletes the pod (with a UID precondition) only on a Drained report whose
// request ID and pod UID both match.
package drain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/mergepatch"
)

// digestLen is the number of hex characters of the SHA-256 digest kept in a
// request ID: 64 bits, enough that two requests of one pod never collide.
const digestLen = 16

// RequestID returns the ID of a drain request: "<reason>-<digest>", where
// reason is the lower-cased DrainReason and digest is the first 16 hex
// characters of SHA-256 over the pod UID, the reason and the session's drain
// sequence number.
//
// The controller takes a new sequence number (SessionStatus.DrainSequence,
// written in the same status patch as the request) for every issuing of a
// request, so no two requests for one pod share an ID: the same revision
// rolled out again after a rollback, or a request withdrawn and issued
// again, gets a fresh ID that no earlier Drained report can answer. A
// restarted controller does not recompute IDs: it keeps the request it finds
// outstanding in status.drain.
func RequestID(pod types.UID, reason lullv1.DrainReason, sequence int64) string {
	h := sha256.New()
	for _, part := range []string{string(pod), string(reason), strconv.FormatInt(sequence, 10)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return strings.ToLower(string(reason)) + "-" + hex.EncodeToString(h.Sum(nil))[:digestLen]
}

// ParseRequestID splits a request ID into its reason and digest. It returns
// an error naming the problem when id is not of the form RequestID returns.
func ParseRequestID(id string) (lullv1.DrainReason, string, error) {
	prefix, digest, ok := strings.Cut(id, "-")
	if !ok {
		return "", "", fmt.Errorf("request ID %q: want <reason>-<digest>", id)
	}
	var reason lullv1.DrainReason
	for _, r := range []lullv1.DrainReason{lullv1.DrainReasonUpdate, lullv1.DrainReasonIdle, lullv1.DrainReasonLifetime, lullv1.DrainReasonManual, lullv1.DrainReasonNodeDrain} {
		if strings.ToLower(string(r)) == prefix {
			reason = r
		}
	}
	if reason == "" {
		return "", "", fmt.Errorf("request ID %q: unknown reason %q", id, prefix)
	}
	if len(digest) != digestLen {
		return "", "", fmt.Errorf("request ID %q: digest must be %d hex characters", id, digestLen)
	}
	if _, err := hex.DecodeString(digest); err != nil {
		return "", "", fmt.Errorf("request ID %q: digest is not hex", id)
	}
	return reason, digest, nil
}

// Answers reports whether report is a Drained answer to req from the pod
// podUID: the report's request ID is req's, and both the report and the
// request name podUID. Late reports (an older request), foreign reports
// (another pod) and malformed reports answer nothing.
func Answers(req *lullv1.DrainRequest, report *lullv1.RuntimeReport, podUID types.UID) bool {
	if req == nil || report == nil || podUID == "" {
		return false
	}
	if Validate(report) != nil {
		return false
	}
	return report.State == lullv1.RuntimeDrained &&
		report.RequestID == req.RequestID &&
		report.PodUID == podUID &&
		req.PodUID == podUID
}

// ErrMalformedReport is wrapped by every error Validate returns.
var ErrMalformedReport = errors.New("malformed runtime report")

// Validate checks a runtime report's shape: a pod UID, a known state, a
// request ID when Draining or Drained, no active turns when Drained.
func Validate(r *lullv1.RuntimeReport) error {
	switch {
	case r == nil:
		return fmt.Errorf("%w: missing", ErrMalformedReport)
	case r.PodUID == "":
		return fmt.Errorf("%w: podUID is empty", ErrMalformedReport)
	case r.ActiveTurns < 0:
		return fmt.Errorf("%w: activeTurns is negative", ErrMalformedReport)
	}
	switch r.State {
	case lullv1.RuntimeServing:
	case lullv1.RuntimeDraining, lullv1.RuntimeDrained:
		if _, _, err := ParseRequestID(r.RequestID); err != nil {
			return fmt.Errorf("%w: state %s: %v", ErrMalformedReport, r.State, err)
		}
		if r.State == lullv1.RuntimeDrained && r.ActiveTurns != 0 {
			return fmt.Errorf("%w: Drained with %d active turns", ErrMalformedReport, r.ActiveTurns)
		}
	default:
		return fmt.Errorf("%w: unknown state %q", ErrMalformedReport, r.State)
	}
	return nil
}

// reportPatch is the body a runtime sends to the sessions/status
// subresource: a JSON merge patch that holds status.runtime and nothing else.
type reportPatch struct {
	Status struct {
		Runtime *lullv1.RuntimeReport `json:"runtime"`
	} `json:"status"`
}

// EncodeReport returns the JSON merge patch (RFC 7386) that sets
// status.runtime to r. It refuses a report Validate refuses.
//
// A merge patch keeps every key of the stored object it does not mention,
// so the patch names each field of the report, an empty optional one as
// null (mergepatch.Whole): status.runtime then holds exactly r, not r
// merged over the previous report (a Serving report would otherwise keep
// the request ID of a withdrawn drain request, and a new pod's report the
// last activity of the old one).
func EncodeReport(r *lullv1.RuntimeReport) ([]byte, error) {
	if err := Validate(r); err != nil {
		return nil, err
	}
	runtime, err := mergepatch.Whole(r)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]map[string]json.RawMessage{"status": {"runtime": runtime}})
}

// DecodeReport parses a patch made by EncodeReport and validates the report
// in it. Unknown fields are an error: a runtime writes only status.runtime.
func DecodeReport(b []byte) (*lullv1.RuntimeReport, error) {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var p reportPatch
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformedReport, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data", ErrMalformedReport)
	}
	if err := Validate(p.Status.Runtime); err != nil {
		return nil, err
	}
	return p.Status.Runtime, nil
}
