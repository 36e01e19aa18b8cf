package bench

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/podprocess"
)

// DrainRequest is the drain request a session's status holds: its ID and
// the pod it is for. The zero value means none.
type DrainRequest struct {
	PodUID, ID string
}

// DrainSnapshot maps session name to its outstanding drain request, as
// read at one moment; a session without a request is absent.
type DrainSnapshot map[string]DrainRequest

// SnapshotDrains reads the drain request of each session that has one.
func SnapshotDrains(sessions []lullv1.Session) DrainSnapshot {
	out := DrainSnapshot{}
	for _, s := range sessions {
		if d := s.Status.Drain; d != nil {
			out[s.Name] = DrainRequest{PodUID: string(d.PodUID), ID: d.RequestID}
		}
	}
	return out
}

// RequestChanges compares two DrainSnapshots of the same sessions, each
// field the sorted names of the sessions in that case.
type RequestChanges struct {
	// Kept: the same request (same ID, same pod) before and after.
	Kept []string
	// Reissued: a request for the same pod, under a new ID (the
	// protocol allows it only for a new issuing: a restart must not).
	Reissued []string
	// Withdrawn: a request before, none after, for a session whose
	// request was for the pod it still runs (after: the podUIDs map).
	Withdrawn []string
	// Moved: a request before, and the session's pod changed since (it
	// drained and was replaced, or its request was for a pod gone).
	Moved []string
	// Issued: no request before, one after.
	Issued []string
}

// CompareRequests compares the drain requests before and after, with
// pods the session → current pod UID map read after (a session missing
// from pods has no pod).
func CompareRequests(before, after DrainSnapshot, pods map[string]string) RequestChanges {
	var c RequestChanges
	for name, b := range before {
		a, ok := after[name]
		switch {
		case ok && a == b:
			c.Kept = append(c.Kept, name)
		case ok && a.PodUID == b.PodUID:
			c.Reissued = append(c.Reissued, name)
		case pods[name] != b.PodUID:
			c.Moved = append(c.Moved, name)
		case !ok:
			c.Withdrawn = append(c.Withdrawn, name)
		default:
			// A request for another pod than before, while the pod is
			// the same as before: a request for a pod the session
			// does not run. Counted as re-issued: it replaced the one
			// the runtime acts on.
			c.Reissued = append(c.Reissued, name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			c.Issued = append(c.Issued, name)
		}
	}
	for _, l := range []*[]string{&c.Kept, &c.Reissued, &c.Withdrawn, &c.Moved, &c.Issued} {
		sort.Strings(*l)
	}
	return c
}

// RestartResult holds the figures of one restart benchmark.
type RestartResult struct {
	Sessions int
	// MidDrain is how many sessions had a drain request outstanding when
	// the controller was killed.
	MidDrain int
	Runtimes podprocess.Mode
	// Ready is from the start of the new controller process to its
	// /readyz answering. The check is a ping: it answers before the
	// caches have synced, so FirstReconcile is when it acts. Resolution
	// 100 ms, as every duration below.
	Ready time.Duration
	// FirstReconcile is until its first completed Session reconcile
	// (controller_runtime_reconcile_total{controller="session"} > 0).
	FirstReconcile time.Duration
	// AllReconciled is until it completed at least as many Session
	// reconciles as there are sessions: every session looked at once
	// (the informer's initial list queues each once); 0 if not within
	// the window.
	AllReconciled time.Duration
	// FirstWrite is until its first write request (any resource, Events
	// included); 0 if none.
	FirstWrite time.Duration
	// Window is how long the restarted controller was watched: until
	// every session was reconciled and it wrote nothing for the quiet
	// period, or the window's limit.
	Window time.Duration
	// Writes counts its write requests (POST, PUT, PATCH, DELETE) in the
	// window, by "VERB resource", " (code)" added for refused ones.
	Writes Tally
	// StatusWrites counts its Session status patches in the window by the
	// rollout reason that caused them.
	StatusWrites Tally
	// Requests compares the drain requests before the kill and after the
	// window.
	Requests RequestChanges
	// RSS is the new process's resident set at the end of the window,
	// PeakRSS its peak (VmHWM) until then; bytes.
	RSS, PeakRSS int64
}

// WriteGroups splits controller writes (by "VERB resource") into those
// to a session's own objects (its status, StatefulSet, pod, Service,
// identity, ConfigMaps), the template's status, and Events.
func WriteGroups(writes Tally) (session, template, events Tally) {
	session, template, events = Tally{}, Tally{}, Tally{}
	for k, v := range writes {
		resource := ""
		if f := strings.Fields(k); len(f) > 1 {
			resource = f[1]
		}
		switch {
		case resource == "events":
			events[k] = v
		case strings.HasPrefix(resource, "sessiontemplates"):
			template[k] = v
		default:
			session[k] = v
		}
	}
	return session, template, events
}

// Check is one target and whether it was met.
type Check struct {
	Name string
	OK   bool
}

// Checks evaluates the restart's targets: a restarted controller writes
// nothing for a session whose status was already right (every status was
// written and the controller quiet before the kill, so any write is a
// rewrite), keeps every outstanding drain request byte for byte (no new
// ID, none withdrawn), admits no session beyond the wave it found, and
// looks at every session within the window.
func (r RestartResult) Checks() []Check {
	session, _, _ := WriteGroups(r.Writes)
	return []Check{
		{"0 session status writes on start-up", r.StatusWrites.Total() == 0},
		{"0 writes to sessions' objects on start-up", session.Total() == 0},
		{"0 drain requests re-issued with a new ID", len(r.Requests.Reissued) == 0},
		{"0 drain requests withdrawn", len(r.Requests.Withdrawn) == 0},
		{"0 drain requests issued beyond the wave", len(r.Requests.Issued) == 0},
		{"every session reconciled within the window", r.AllReconciled > 0},
	}
}

// Print writes the figures and checks them against the targets; ok is
// false when one is missed.
func (r RestartResult) Print(w io.Writer) (ok bool) {
	session, template, events := WriteGroups(r.Writes)
	at := func(d time.Duration) string {
		if d == 0 {
			return "—"
		}
		return d.Round(100 * time.Millisecond).String()
	}
	fmt.Fprintf(w, "\ncontroller restart (SIGKILL) with %d sessions, %d mid-drain (%s mode)\n", r.Sessions, r.MidDrain, r.Runtimes)
	fmt.Fprintf(w, "  from the new process's start:\n")
	fmt.Fprintf(w, "    /readyz answers (a ping):         %s\n", at(r.Ready))
	fmt.Fprintf(w, "    first Session reconcile done:     %s\n", at(r.FirstReconcile))
	fmt.Fprintf(w, "    every session reconciled once:    %s\n", at(r.AllReconciled))
	fmt.Fprintf(w, "    first write:                      %s\n", at(r.FirstWrite))
	fmt.Fprintf(w, "  writes in the first %s:\n", r.Window.Round(100*time.Millisecond))
	fmt.Fprintf(w, "    to sessions' objects:  %.0f%s\n", session.Total(), session.detail())
	fmt.Fprintf(w, "    session status writes by reason: %.0f%s\n", r.StatusWrites.Total(), r.StatusWrites.detail())
	fmt.Fprintf(w, "    template status:       %.0f%s\n", template.Total(), template.detail())
	fmt.Fprintf(w, "    Events:                %.0f%s\n", events.Total(), events.detail())
	c := r.Requests
	fmt.Fprintf(w, "  drain requests before → after: %d kept, %d re-issued with a new ID, %d withdrawn, %d newly issued, %d moved on%s\n",
		len(c.Kept), len(c.Reissued), len(c.Withdrawn), len(c.Issued), len(c.Moved), examples(c))
	fmt.Fprintf(w, "  controller RSS after start-up:  %.1f MiB (peak %.1f MiB)\n", float64(r.RSS)/(1<<20), float64(r.PeakRSS)/(1<<20))
	ok = true
	fmt.Fprintf(w, "targets\n")
	for _, c := range r.Checks() {
		mark := "met"
		if !c.OK {
			mark, ok = "MISSED", false
		}
		fmt.Fprintf(w, "  %-46s %s\n", c.Name, mark)
	}
	return ok
}

// Tally counts by key: requests by "VERB resource", status writes by
// reason.
type Tally map[string]float64

// Total is the sum of every count.
func (t Tally) Total() float64 {
	n := 0.0
	for _, v := range t {
		n += v
	}
	return n
}

// String is "key count, key count", keys sorted.
func (t Tally) String() string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.0f", k, t[k])
	}
	return strings.Join(parts, ", ")
}

func (t Tally) detail() string {
	if len(t) == 0 {
		return ""
	}
	return " (" + t.String() + ")"
}

// examples names up to three sessions of each case the targets forbid.
func examples(c RequestChanges) string {
	var parts []string
	for _, e := range []struct {
		what  string
		names []string
	}{{"re-issued", c.Reissued}, {"withdrawn", c.Withdrawn}, {"issued", c.Issued}} {
		if len(e.names) > 0 {
			parts = append(parts, e.what+": "+strings.Join(e.names[:min(3, len(e.names))], ", "))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "\n    " + strings.Join(parts, "; ")
}
