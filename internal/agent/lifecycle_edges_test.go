package agent

import (
	"net/http"
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/runtimesdk"
)

// Only a turn begun, attempted during an uncommitted Idle drain, or ended,
// and POST /v1/activity move lastActivity. Every other request (state
// reads, the stream, probes, renewals, malformed or unknown requests) under
// every drain reason, and a turn attempted while the pod is committed for
// replacement or while the runtime starts, leaves it as it was.
func TestNoOtherRequestMovesLastActivityUnderAnyDrain(t *testing.T) {
	for _, tc := range []struct {
		name string
		gate func() *runtimesdk.Gate
	}{
		{"serving", servingGate},
		{"starting", runtimesdk.NewGate},
		{"update drain", func() *runtimesdk.Gate { g := servingGate(); g.SetRequest(req1, lullv1.DrainReasonUpdate); return g }},
		{"lifetime drain", func() *runtimesdk.Gate {
			g := servingGate()
			g.SetRequest("lifetime-0123456789abcdef", lullv1.DrainReasonLifetime)
			return g
		}},
		{"manual drain", func() *runtimesdk.Gate {
			g := servingGate()
			g.SetRequest("manual-0123456789abcdef", lullv1.DrainReasonManual)
			return g
		}},
		{"idle drain", func() *runtimesdk.Gate { g := servingGate(); g.SetRequest(idleReq, lullv1.DrainReasonIdle); return g }},
		{"idle drain committed", func() *runtimesdk.Gate {
			g := servingGate()
			g.SetRequest(idleReq, lullv1.DrainReasonIdle)
			g.SetHeld(true)
			return g
		}},
		{"idle drain withdrawn, reopening", func() *runtimesdk.Gate {
			g := servingGate()
			g.SetRequest(idleReq, lullv1.DrainReasonIdle)
			g.SetRequest("", "")
			return g
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.gate()
			srv := newTestServer(t, g)
			c := srv.Client()
			// A leased turn begun before (where the gate accepted one), to
			// renew.
			var live string
			if g.Snapshot().Accepting {
				code, _, b := call(t, c, "POST", srv.URL+"/v1/turns", `{"lease":"1h"}`)
				if code != http.StatusCreated {
					t.Fatalf("POST /v1/turns = %d %s", code, b)
				}
				live = decode[turnResponse](t, b).ID
			}
			mark := g.Snapshot().LastActivity
			time.Sleep(2 * time.Millisecond)
			requests := [][3]string{
				{"GET", "/v1/drain", ""},
				{"HEAD", "/v1/drain", ""},
				{"GET", "/healthz", ""},
				{"GET", "/v1/turns", ""},
				{"PUT", "/v1/activity", ""},
				{"GET", "/v1/activity", ""},
				{"POST", "/v1/turns", `{"lease":"-1s"}`},
				{"POST", "/v1/turns", `{"lease":"soon"}`},
				{"POST", "/v1/turns", `{"unknown":1}`},
				{"DELETE", "/v1/turns/t-00000000000000aa", ""},
				{"POST", "/v1/turns/t-00000000000000aa/renew", ""},
				{"GET", "/nope", ""},
			}
			if live != "" {
				requests = append(requests, [3]string{"POST", "/v1/turns/" + live + "/renew", ""})
			}
			if !g.Snapshot().Accepting && !(g.Snapshot().Reason == lullv1.DrainReasonIdle && !g.Snapshot().Replacing) {
				// A refused turn that is not a user back in a session being
				// culled for inactivity.
				requests = append(requests, [3]string{"POST", "/v1/turns", ""})
			}
			for _, r := range requests {
				call(t, c, r[0], srv.URL+r[1], r[2])
			}
			firstEvent(t, srv)
			if got := g.Snapshot().LastActivity; !got.Equal(mark) {
				t.Errorf("lastActivity moved from %v to %v by requests that are not activity", mark, got)
			}
		})
	}
}
