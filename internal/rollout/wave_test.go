package rollout

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// waveSession is a session as the template controller's cache holds it.
type waveSession struct {
	name    string
	waiting bool              // UpToDate=False WaitingForWave
	active  int32             // the runtime's active turns
	ready   time.Duration     // Ready for this long; 0 means not Ready
	seq     int64             // status.drainSequence
	drain   bool              // an Update request outstanding
	gone    bool              // suspended
	revoked *lullv1.WaveEntry // the place status.revokedAdmission names
}

func (w waveSession) session() lullv1.Session {
	s := lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: w.name}, Spec: lullv1.SessionSpec{Suspend: w.gone}}
	s.Status.PodUID = "pod-" + "x"
	s.Status.DrainSequence = w.seq
	s.Status.Runtime = &lullv1.RuntimeReport{PodUID: s.Status.PodUID, ActiveTurns: w.active}
	if w.ready > 0 {
		s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: lullv1.ConditionReady, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-w.ready))})
	}
	if w.waiting {
		s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionFalse, Reason: lullv1.ReasonWaitingForWave})
	}
	if w.drain {
		s.Status.Drain = &lullv1.DrainRequest{RequestID: "update-x", Reason: lullv1.DrainReasonUpdate, Sequence: w.seq}
	}
	if e := w.revoked; e != nil {
		s.Status.RevokedAdmission = &lullv1.RevokedAdmission{Sequence: e.Sequence, AdmittedAt: e.AdmittedAt}
	}
	return s
}

func entry(name string, seq int64, age time.Duration) lullv1.WaveEntry {
	return lullv1.WaveEntry{Session: name, Sequence: seq, AdmittedAt: metav1.NewTime(now.Add(-age))}
}

func waveNames(wave []lullv1.WaveEntry) string {
	var out []string
	for _, e := range wave {
		out = append(out, e.Session)
	}
	return strings.Join(out, ",")
}

func TestPlanWave(t *testing.T) {
	for _, tc := range []struct {
		name     string
		wave     []lullv1.WaveEntry
		sessions []waveSession
		max      int
		want     string
	}{
		{name: "idle first, then Ready the longest, then by name, up to max",
			sessions: []waveSession{
				{name: "busy-old", waiting: true, active: 1, ready: time.Hour},
				{name: "idle-new", waiting: true, ready: time.Minute},
				{name: "idle-old", waiting: true, ready: time.Hour},
				{name: "b-idle-same", waiting: true, ready: time.Minute},
				{name: "busy-new", waiting: true, active: 2, ready: time.Minute},
			}, max: 4, want: "idle-old,b-idle-same,idle-new,busy-old"},
		{name: "only waiting sessions are admitted",
			sessions: []waveSession{{name: "current", ready: time.Hour}, {name: "w", waiting: true, ready: time.Hour}}, max: 5, want: "w"},
		{name: "a full wave admits nobody",
			wave:     []lullv1.WaveEntry{entry("a", 1, 0), entry("b", 1, 0)},
			sessions: []waveSession{{name: "a", seq: 1, drain: true}, {name: "b", seq: 1, drain: true}, {name: "c", waiting: true, ready: time.Hour}},
			max:      2, want: "a,b"},
		{name: "a wave over a lowered max keeps its entries and admits nobody",
			wave:     []lullv1.WaveEntry{entry("a", 1, 0), entry("b", 1, 0)},
			sessions: []waveSession{{name: "a", seq: 1, drain: true}, {name: "b", seq: 1, drain: true}, {name: "c", waiting: true, ready: time.Hour}},
			max:      1, want: "a,b"},
		{name: "a settled session that issued its request leaves; the next comes in",
			wave:     []lullv1.WaveEntry{entry("a", 1, time.Minute), entry("b", 1, time.Minute)},
			sessions: []waveSession{{name: "a", seq: 1, ready: time.Second}, {name: "b", seq: 1, drain: true}, {name: "c", waiting: true, ready: time.Hour}},
			max:      2, want: "b,c"},
		{name: "a lagging cache that has not seen the request keeps the entry",
			wave:     []lullv1.WaveEntry{entry("a", 2, 10*time.Second)},
			sessions: []waveSession{{name: "a", seq: 1, ready: time.Hour}, {name: "c", waiting: true, ready: time.Hour}},
			max:      1, want: "a"},
		{name: "an admission never taken up is held past its TTL until its revoke lands: the session may be writing its request",
			wave:     []lullv1.WaveEntry{entry("a", 2, UnusedAdmissionTTL+time.Second)},
			sessions: []waveSession{{name: "a", seq: 1, ready: time.Hour}, {name: "c", waiting: true, ready: time.Hour}},
			max:      1, want: "a"},
		{name: "an admission revoked on its session is released",
			wave:     []lullv1.WaveEntry{entry("a", 2, UnusedAdmissionTTL+time.Second)},
			sessions: []waveSession{{name: "a", seq: 1, ready: time.Hour, revoked: new(entry("a", 2, UnusedAdmissionTTL+time.Second))}, {name: "c", waiting: true, ready: time.Hour}},
			max:      1, want: "c"},
		{name: "a revoke of an earlier place of the same sequence releases nothing",
			wave:     []lullv1.WaveEntry{entry("a", 2, time.Minute)},
			sessions: []waveSession{{name: "a", seq: 1, ready: time.Hour, revoked: new(entry("a", 2, 10*time.Minute))}, {name: "c", waiting: true, ready: time.Hour}},
			max:      1, want: "a"},
		{name: "a session moving to its new pod (not Ready) keeps its place",
			wave:     []lullv1.WaveEntry{entry("a", 1, time.Minute)},
			sessions: []waveSession{{name: "a", seq: 1}, {name: "c", waiting: true, ready: time.Hour}},
			max:      1, want: "a"},
		{name: "deleted sessions, and suspended ones whose request under the place gave way, leave",
			wave:     []lullv1.WaveEntry{entry("gone", 1, 0), entry("s", 1, 0)},
			sessions: []waveSession{{name: "s", seq: 1, gone: true}, {name: "c", waiting: true, ready: time.Hour}},
			max:      1, want: "c"},
		{name: "a suspended session whose Update request is still outstanding keeps its place: resumed before its controller acted, it drains under it",
			wave:     []lullv1.WaveEntry{entry("s", 1, 0)},
			sessions: []waveSession{{name: "s", seq: 1, drain: true, gone: true}, {name: "c", waiting: true, ready: time.Hour}},
			max:      1, want: "s"},
		{name: "a suspended session's place not taken up is held until its revoke lands",
			wave:     []lullv1.WaveEntry{entry("s", 2, 0)},
			sessions: []waveSession{{name: "s", seq: 1, gone: true}, {name: "c", waiting: true, ready: time.Hour}},
			max:      1, want: "s"},
		{name: "a suspended session's place revoked on it is released",
			wave:     []lullv1.WaveEntry{entry("s", 2, 0)},
			sessions: []waveSession{{name: "s", seq: 1, gone: true, revoked: new(entry("s", 2, 0))}, {name: "c", waiting: true, ready: time.Hour}},
			max:      1, want: "c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sessions []lullv1.Session
			for _, w := range tc.sessions {
				sessions = append(sessions, w.session())
			}
			got := PlanWave(tc.wave, sessions, tc.max, now, "")
			if waveNames(got) != tc.want {
				t.Errorf("wave = %s, want %s", waveNames(got), tc.want)
			}
			for _, e := range got {
				for _, s := range sessions {
					if s.Name == e.Session && !contains(tc.wave, e.Session) && e.Sequence != s.Status.DrainSequence+1 {
						t.Errorf("%s admitted for sequence %d, want its next, %d", e.Session, e.Sequence, s.Status.DrainSequence+1)
					}
				}
			}
		})
	}
}

func contains(wave []lullv1.WaveEntry, name string) bool {
	for _, e := range wave {
		if e.Session == name {
			return true
		}
	}
	return false
}

func TestAdmitted(t *testing.T) {
	s := waveSession{name: "a", seq: 3}.session()
	for _, tc := range []struct {
		name  string
		wave  []lullv1.WaveEntry
		drain bool
		want  bool
	}{
		{"no entry", nil, false, false},
		{"entry for the next request", []lullv1.WaveEntry{entry("a", 4, 0)}, false, true},
		{"entry already used, nothing outstanding", []lullv1.WaveEntry{entry("a", 3, 0)}, false, false},
		{"entry used by the request outstanding: a re-request keeps the place", []lullv1.WaveEntry{entry("a", 3, 0)}, true, true},
		{"another session's entry", []lullv1.WaveEntry{entry("b", 4, 0)}, false, false},
		{"entry for the next request, revoked", []lullv1.WaveEntry{entry("a", 4, 3*time.Minute)}, false, false},
		{"entry revoked after an idle drain took its sequence", []lullv1.WaveEntry{entry("a", 3, 3*time.Minute)}, true, false},
		{"entry for the next request admitted after an earlier one was revoked", []lullv1.WaveEntry{entry("a", 4, time.Second)}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := s.DeepCopy()
			if strings.Contains(tc.name, "revoked") {
				// The template controller took back the place of this
				// sequence admitted 3 minutes ago.
				s.Status.RevokedAdmission = &lullv1.RevokedAdmission{Sequence: tc.wave[0].Sequence, AdmittedAt: metav1.NewTime(now.Add(-3 * time.Minute))}
			}
			if tc.drain {
				s.Status.Drain = &lullv1.DrainRequest{Reason: lullv1.DrainReasonUpdate, Sequence: 3}
			}
			if got := Admitted(tc.wave, s); got != tc.want {
				t.Errorf("Admitted = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMaxUnavailable(t *testing.T) {
	for _, tc := range []struct {
		v       *intstr.IntOrString
		running int
		want    int
	}{
		{nil, 100, 25}, {nil, 3, 1}, {nil, 0, 1},
		{ptrIntOrString(intstr.FromInt32(2)), 20, 2},
		{ptrIntOrString(intstr.FromString("50%")), 5, 2},
		{ptrIntOrString(intstr.FromString("100%")), 7, 7},
		{ptrIntOrString(intstr.FromString("1%")), 10, 1},
	} {
		if got := MaxUnavailable(lullv1.UpdatePolicy{MaxUnavailable: tc.v}, tc.running); got != tc.want {
			t.Errorf("MaxUnavailable(%v, %d) = %d, want %d", tc.v, tc.running, got, tc.want)
		}
	}
}

func ptrIntOrString(v intstr.IntOrString) *intstr.IntOrString { return &v }

func TestPlacesToRevoke(t *testing.T) {
	revoked := entry("revoked", 2, UnusedAdmissionTTL+time.Second)
	sessions := []lullv1.Session{waveSession{name: "old", seq: 1}.session(), waveSession{name: "young", seq: 1}.session(), waveSession{name: "used", seq: 2}.session(),
		waveSession{name: "revoked", seq: 1, revoked: &revoked}.session(), waveSession{name: "suspended", seq: 1, gone: true}.session()}
	wave := []lullv1.WaveEntry{entry("old", 2, UnusedAdmissionTTL+time.Second), entry("young", 2, time.Minute), entry("used", 2, UnusedAdmissionTTL+time.Second), revoked,
		entry("suspended", 2, UnusedAdmissionTTL+time.Second)}
	if got := waveNames(PlacesToRevoke(wave, sessions, now)); got != "old,suspended" {
		t.Errorf("to revoke = %s, want old,suspended (young is within its TTL, used took its place up, revoked is taken back already, "+
			"suspended has not taken its place up: resumed before its controller acted, it would)", got)
	}
}

// A session whose pod runs an older template revision is admitted before
// it writes that it waits; under Passive (no revision given) it is not.
func TestPlanWaveAdmitsStaleSessionsByRevision(t *testing.T) {
	stale := waveSession{name: "stale", ready: time.Hour}.session()
	stale.Status.TemplateRevision = "old"
	current := waveSession{name: "current", ready: time.Hour}.session()
	current.Status.TemplateRevision = "new"
	sessions := []lullv1.Session{stale, current}
	if got := waveNames(PlanWave(nil, sessions, 5, now, "new")); got != "stale" {
		t.Errorf("wave = %s, want stale", got)
	}
	if got := waveNames(PlanWave(nil, sessions, 5, now, "")); got != "" {
		t.Errorf("under Passive: wave = %s, want none", got)
	}
}
