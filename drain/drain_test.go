package drain_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

const (
	podA types.UID = "9f1c2a6e-0d4b-4e8e-8f57-1c2b3d4e5f60"
	podB types.UID = "0b7e5d2c-3a1f-4c6d-9e8b-7a6f5e4d3c2b"
)

func TestRequestIDDeterministic(t *testing.T) {
	for _, reason := range []lullv1.DrainReason{lullv1.DrainReasonUpdate, lullv1.DrainReasonIdle, lullv1.DrainReasonLifetime, lullv1.DrainReasonManual, lullv1.DrainReasonNodeDrain} {
		a := drain.RequestID(podA, reason, 2)
		if b := drain.RequestID(podA, reason, 2); a != b {
			t.Errorf("RequestID(%s) not deterministic: %q then %q", reason, a, b)
		}
		prefix := strings.ToLower(string(reason)) + "-"
		if !strings.HasPrefix(a, prefix) || len(a) != len(prefix)+16 {
			t.Errorf("RequestID(%s) = %q, want %s<16 hex>", reason, a, prefix)
		}
		got, digest, err := drain.ParseRequestID(a)
		if err != nil || got != reason || digest != strings.TrimPrefix(a, prefix) {
			t.Errorf("ParseRequestID(%q) = %q, %q, %v; want %q, its digest, nil", a, got, digest, err, reason)
		}
	}
}

func TestRequestIDDistinct(t *testing.T) {
	type in struct {
		pod      types.UID
		reason   lullv1.DrainReason
		sequence int64
	}
	inputs := []in{
		{podA, lullv1.DrainReasonUpdate, 1},
		{podA, lullv1.DrainReasonUpdate, 2}, // next request, same pod
		{podB, lullv1.DrainReasonUpdate, 1}, // same sequence, other pod
		{podA, lullv1.DrainReasonManual, 1}, // same sequence, other reason
		{podA, lullv1.DrainReasonIdle, 3},
		{podA, lullv1.DrainReasonIdle, 4},
		{podA, lullv1.DrainReasonUpdate, 0},
		// Parts are delimited: moving a boundary changes the ID.
		{"a1", lullv1.DrainReasonUpdate, 1},
		{"a", lullv1.DrainReasonUpdate, 11},
	}
	seen := map[string]in{}
	for _, i := range inputs {
		id := drain.RequestID(i.pod, i.reason, i.sequence)
		if prev, ok := seen[id]; ok {
			t.Errorf("RequestID%v = RequestID%v = %q", i, prev, id)
		}
		seen[id] = i
	}
}

func TestParseRequestID(t *testing.T) {
	valid := drain.RequestID(podA, lullv1.DrainReasonLifetime, 7)
	for _, tc := range []struct {
		id      string
		reason  lullv1.DrainReason
		wantErr string
	}{
		{id: valid, reason: lullv1.DrainReasonLifetime},
		{id: "update-0123456789abcdef", reason: lullv1.DrainReasonUpdate},
		{id: "", wantErr: "want <reason>-<digest>"},
		{id: "update0123456789abcdef", wantErr: "want <reason>-<digest>"},
		{id: "Update-0123456789abcdef", wantErr: "unknown reason"},
		{id: "reboot-0123456789abcdef", wantErr: "unknown reason"},
		{id: "-0123456789abcdef", wantErr: "unknown reason"},
		{id: "update-0123456789abcde", wantErr: "16 hex characters"},
		{id: "update-0123456789abcdef0", wantErr: "16 hex characters"},
		{id: "update-", wantErr: "16 hex characters"},
		{id: "update-0123456789abcdeg", wantErr: "not hex"},
		{id: "update-0123-56789abcdef", wantErr: "not hex"},
	} {
		reason, digest, err := drain.ParseRequestID(tc.id)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseRequestID(%q) error = %v, want one containing %q", tc.id, err, tc.wantErr)
			}
			continue
		}
		if err != nil || reason != tc.reason || len(digest) != 16 {
			t.Errorf("ParseRequestID(%q) = %q, %q, %v; want %q, 16 hex characters, nil", tc.id, reason, digest, err, tc.reason)
		}
	}
}

func TestValidate(t *testing.T) {
	id := drain.RequestID(podA, lullv1.DrainReasonUpdate, 2)
	report := func(mutate func(*lullv1.RuntimeReport)) *lullv1.RuntimeReport {
		r := &lullv1.RuntimeReport{PodUID: podA, RequestID: id, State: lullv1.RuntimeDraining, ActiveTurns: 2}
		mutate(r)
		return r
	}
	for _, tc := range []struct {
		name    string
		report  *lullv1.RuntimeReport
		wantErr string
	}{
		{"nil", nil, "missing"},
		{"draining", report(func(*lullv1.RuntimeReport) {}), ""},
		{"drained", report(func(r *lullv1.RuntimeReport) { r.State, r.ActiveTurns = lullv1.RuntimeDrained, 0 }), ""},
		{"serving without request", report(func(r *lullv1.RuntimeReport) { r.State, r.RequestID = lullv1.RuntimeServing, "" }), ""},
		{"serving with any request", report(func(r *lullv1.RuntimeReport) { r.State, r.RequestID = lullv1.RuntimeServing, "junk" }), ""},
		{"no pod UID", report(func(r *lullv1.RuntimeReport) { r.PodUID = "" }), "podUID is empty"},
		{"negative turns", report(func(r *lullv1.RuntimeReport) { r.ActiveTurns = -1 }), "activeTurns is negative"},
		{"drained with turns", report(func(r *lullv1.RuntimeReport) { r.State = lullv1.RuntimeDrained }), "Drained with 2 active turns"},
		{"draining without request", report(func(r *lullv1.RuntimeReport) { r.RequestID = "" }), "state Draining"},
		{"drained with malformed request", report(func(r *lullv1.RuntimeReport) {
			r.State, r.ActiveTurns, r.RequestID = lullv1.RuntimeDrained, 0, "update-xyz"
		}), "state Drained"},
		{"empty state", report(func(r *lullv1.RuntimeReport) { r.State = "" }), "unknown state"},
		{"unknown state", report(func(r *lullv1.RuntimeReport) { r.State = "drained" }), "unknown state"},
	} {
		err := drain.Validate(tc.report)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: Validate = %v, want nil", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: Validate = %v, want an error containing %q", tc.name, err, tc.wantErr)
		case tc.wantErr != "" && !errors.Is(err, drain.ErrMalformedReport):
			t.Errorf("%s: Validate = %v, want it to wrap ErrMalformedReport", tc.name, err)
		}
	}
}

func TestAnswers(t *testing.T) {
	current := drain.RequestID(podA, lullv1.DrainReasonUpdate, 3)
	older := drain.RequestID(podA, lullv1.DrainReasonUpdate, 2)
	req := &lullv1.DrainRequest{RequestID: current, PodUID: podA, Reason: lullv1.DrainReasonUpdate, Revision: "rev-3"}
	drained := func(mutate func(*lullv1.RuntimeReport)) *lullv1.RuntimeReport {
		r := &lullv1.RuntimeReport{PodUID: podA, RequestID: current, State: lullv1.RuntimeDrained}
		mutate(r)
		return r
	}
	same := func(*lullv1.RuntimeReport) {}
	for _, tc := range []struct {
		name   string
		req    *lullv1.DrainRequest
		report *lullv1.RuntimeReport
		pod    types.UID
		want   bool
	}{
		{"matching drained report", req, drained(same), podA, true},
		{"late: answers an older request", req, drained(func(r *lullv1.RuntimeReport) { r.RequestID = older }), podA, false},
		{"foreign: another pod's report", req, drained(func(r *lullv1.RuntimeReport) { r.PodUID = podB }), podA, false},
		{"request for another pod", &lullv1.DrainRequest{RequestID: current, PodUID: podB}, drained(same), podA, false},
		{"pod replaced since the request", req, drained(same), podB, false},
		{"still draining", req, drained(func(r *lullv1.RuntimeReport) { r.State, r.ActiveTurns = lullv1.RuntimeDraining, 1 }), podA, false},
		{"serving", req, drained(func(r *lullv1.RuntimeReport) { r.State = lullv1.RuntimeServing }), podA, false},
		{"malformed: drained with active turns", req, drained(func(r *lullv1.RuntimeReport) { r.ActiveTurns = 1 }), podA, false},
		{"malformed: unknown state", req, drained(func(r *lullv1.RuntimeReport) { r.State = "Done" }), podA, false},
		{"malformed: no pod UID", &lullv1.DrainRequest{RequestID: current}, drained(func(r *lullv1.RuntimeReport) { r.PodUID = "" }), "", false},
		{"no request", nil, drained(same), podA, false},
		{"no report", req, nil, podA, false},
		{"no pod", req, drained(same), "", false},
	} {
		if got := drain.Answers(tc.req, tc.report, tc.pod); got != tc.want {
			t.Errorf("%s: Answers = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestEncodeReportHoldsOnlyStatusRuntime(t *testing.T) {
	r := &lullv1.RuntimeReport{PodUID: podA, State: lullv1.RuntimeServing}
	b, err := drain.EncodeReport(r)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatalf("EncodeReport = %s: %v", b, err)
	}
	if len(top) != 1 || len(top["status"]) != 1 || top["status"]["runtime"] == nil {
		t.Errorf("EncodeReport = %s, want {\"status\":{\"runtime\":…}} only", b)
	}
	if _, err := drain.EncodeReport(&lullv1.RuntimeReport{State: lullv1.RuntimeServing}); !errors.Is(err, drain.ErrMalformedReport) {
		t.Errorf("EncodeReport(no pod UID) error = %v, want ErrMalformedReport", err)
	}
}

// mergePatch applies an RFC 7386 JSON merge patch to doc.
func mergePatch(doc, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	d, ok := doc.(map[string]any)
	if !ok {
		d = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(d, k)
		} else {
			d[k] = mergePatch(d[k], v)
		}
	}
	return d
}

// TestEncodeReportReplacesThePreviousReport applies report patches as the
// API server does, one over the other: status.runtime must hold exactly the
// last report, with nothing left over from an earlier one (another pod's,
// or a withdrawn request's), and the rest of status untouched.
func TestEncodeReportReplacesThePreviousReport(t *testing.T) {
	la := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	id := drain.RequestID(podA, lullv1.DrainReasonUpdate, 2)
	var doc any = map[string]any{"status": map[string]any{"phase": "Running"}}
	for _, r := range []*lullv1.RuntimeReport{
		{PodUID: podA, RequestID: id, State: lullv1.RuntimeDrained, LastActivity: &la, ReportedAt: &la},
		{PodUID: podB, State: lullv1.RuntimeServing},
		{PodUID: podB, RequestID: id, State: lullv1.RuntimeDraining, ActiveTurns: 3},
		{PodUID: podB, State: lullv1.RuntimeServing, ActiveTurns: 1, LastActivity: &la},
	} {
		b, err := drain.EncodeReport(r)
		if err != nil {
			t.Fatal(err)
		}
		var patch any
		if err := json.Unmarshal(b, &patch); err != nil {
			t.Fatal(err)
		}
		doc = mergePatch(doc, patch)
		status := doc.(map[string]any)["status"].(map[string]any)
		if status["phase"] != "Running" {
			t.Fatalf("patch %s changed status.phase", b)
		}
		stored, err := json.Marshal(status["runtime"])
		if err != nil {
			t.Fatal(err)
		}
		var got lullv1.RuntimeReport
		if err := json.Unmarshal(stored, &got); err != nil {
			t.Fatal(err)
		}
		if !equalReports(&got, r) {
			t.Errorf("after patch %s status.runtime = %s, want exactly %+v", b, stored, r)
		}
	}
}

func TestDecodeReportRejects(t *testing.T) {
	good, err := drain.EncodeReport(&lullv1.RuntimeReport{PodUID: podA, State: lullv1.RuntimeServing})
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]string{
		"empty":             ``,
		"not JSON":          `status`,
		"no runtime":        `{"status":{}}`,
		"null runtime":      `{"status":{"runtime":null}}`,
		"other field":       `{"status":{"runtime":{"podUID":"a","state":"Serving","activeTurns":0},"phase":"Running"}}`,
		"metadata":          `{"metadata":{"labels":{"a":"b"}},"status":{"runtime":{"podUID":"a","state":"Serving","activeTurns":0}}}`,
		"unknown in report": `{"status":{"runtime":{"podUID":"a","state":"Serving","activeTurns":0,"extra":1}}}`,
		"trailing data":     string(good) + `{}`,
		"invalid report":    `{"status":{"runtime":{"podUID":"a","state":"Drained","activeTurns":0}}}`,
	} {
		if _, err := drain.DecodeReport([]byte(in)); !errors.Is(err, drain.ErrMalformedReport) {
			t.Errorf("%s: DecodeReport(%s) error = %v, want ErrMalformedReport", name, in, err)
		}
	}
}

// normalise makes a report comparable after a trip through JSON: times are
// stored to the second (in UTC), and a zero time is stored as absent.
func normalise(r *lullv1.RuntimeReport) *lullv1.RuntimeReport {
	r = r.DeepCopy()
	norm := func(t *metav1.Time) *metav1.Time {
		if t == nil {
			return nil
		}
		n := metav1.NewTime(t.UTC().Truncate(time.Second))
		if n.IsZero() {
			return nil
		}
		return &n
	}
	r.LastActivity, r.ReportedAt = norm(r.LastActivity), norm(r.ReportedAt)
	return r
}

func equalReports(a, b *lullv1.RuntimeReport) bool {
	a, b = normalise(a), normalise(b)
	eq := func(x, y *metav1.Time) bool {
		if x == nil || y == nil {
			return x == y
		}
		return x.Equal(y)
	}
	return a.PodUID == b.PodUID && a.RequestID == b.RequestID && a.State == b.State &&
		a.ActiveTurns == b.ActiveTurns && eq(a.LastActivity, b.LastActivity) && eq(a.ReportedAt, b.ReportedAt)
}

// fuzzTime maps a fuzzed number to a time RFC 3339 can carry (years 1 to
// 9999), with sub-second precision the wire drops; ok=false means absent.
func fuzzTime(sec int64, nsec uint32, ok bool) *metav1.Time {
	if !ok {
		return nil
	}
	const span = 253402300799 + 62135596800 // 0001-01-01 to 9999-12-31T23:59:59, in seconds
	if sec < 0 {
		sec = -(sec + 1)
	}
	t := metav1.NewTime(time.Unix(sec%span-62135596800, int64(nsec%1e9)))
	return &t
}

func FuzzReportRoundTrip(f *testing.F) {
	id := drain.RequestID(podA, lullv1.DrainReasonUpdate, 2)
	f.Add(string(podA), "", "Serving", int32(0), int64(1767225600), uint32(0), true, int64(0), uint32(0), false)
	f.Add(string(podA), id, "Draining", int32(3), int64(1767225600), uint32(500), true, int64(1767225601), uint32(999999999), true)
	f.Add(string(podA), id, "Drained", int32(0), int64(0), uint32(0), false, int64(1767225601), uint32(1), true)
	f.Add(string(podA), id, "Drained", int32(1), int64(0), uint32(0), false, int64(0), uint32(0), false)
	f.Add("", "", "Serving", int32(-1), int64(-5), uint32(0), true, int64(0), uint32(0), false)
	f.Add("0", "idle-0000000000000000", "Draining", int32(2147483647), int64(0), uint32(1), true, int64(0), uint32(0), false) // zero time but for the nanoseconds
	f.Add("pod<&>", "idle-0123456789abcdef", "Draining", int32(2147483647), int64(0), uint32(0), true, int64(0), uint32(0), false)
	f.Fuzz(func(t *testing.T, pod, requestID, state string, active int32,
		laSec int64, laNsec uint32, hasLA bool, atSec int64, atNsec uint32, hasAt bool) {
		if !utf8.ValidString(pod) || !utf8.ValidString(requestID) || !utf8.ValidString(state) {
			t.Skip("JSON carries only valid UTF-8; invalid bytes become U+FFFD")
		}
		in := &lullv1.RuntimeReport{
			PodUID: types.UID(pod), RequestID: requestID, State: lullv1.RuntimeState(state), ActiveTurns: active,
			LastActivity: fuzzTime(laSec, laNsec, hasLA), ReportedAt: fuzzTime(atSec, atNsec, hasAt),
		}
		b, err := drain.EncodeReport(in)
		if verr := drain.Validate(in); verr != nil {
			if err == nil {
				t.Fatalf("EncodeReport accepted a report Validate refuses (%v): %s", verr, b)
			}
			return
		}
		if err != nil {
			t.Fatalf("EncodeReport(%+v): %v", in, err)
		}
		out, err := drain.DecodeReport(b)
		if err != nil {
			t.Fatalf("DecodeReport(EncodeReport(%+v)) = %v; patch %s", in, err, b)
		}
		if !equalReports(in, out) {
			t.Fatalf("round trip changed the report:\n in  %+v\n out %+v\n patch %s", normalise(in), normalise(out), b)
		}
	})
}

func FuzzDecodeReport(f *testing.F) {
	id := drain.RequestID(podA, lullv1.DrainReasonIdle, 4)
	for _, r := range []*lullv1.RuntimeReport{
		{PodUID: podA, State: lullv1.RuntimeServing},
		{PodUID: podA, RequestID: id, State: lullv1.RuntimeDraining, ActiveTurns: 4},
		{PodUID: podA, RequestID: id, State: lullv1.RuntimeDrained, LastActivity: fuzzTime(1767225600, 0, true), ReportedAt: fuzzTime(1767225660, 0, true)},
	} {
		b, err := drain.EncodeReport(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"status":{"runtime":null}}`))
	f.Add([]byte(`{"status":{"runtime":{"podUID":"a","state":"Drained","requestID":"update-0123456789abcdef","activeTurns":-1}}}`))
	f.Add([]byte(`{"status":{"runtime":{"podUID":"a","state":"Serving","activeTurns":0,"lastActivity":"not a time"}}}`))
	f.Add([]byte(`{"status":{"runtime":{"podUID":"a","state":"Serving","activeTurns":0}}} {}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := drain.DecodeReport(b)
		if err != nil {
			if !errors.Is(err, drain.ErrMalformedReport) {
				t.Fatalf("DecodeReport(%q) error %v does not wrap ErrMalformedReport", b, err)
			}
			return
		}
		if err := drain.Validate(r); err != nil {
			t.Fatalf("DecodeReport(%q) accepted a report Validate refuses: %v", b, err)
		}
		again, err := drain.EncodeReport(r)
		if err != nil {
			t.Fatalf("EncodeReport(DecodeReport(%q)): %v", b, err)
		}
		r2, err := drain.DecodeReport(again)
		if err != nil || !equalReports(r, r2) {
			t.Fatalf("re-encoding changed the report: %q -> %s (%v)", b, again, err)
		}
	})
}
