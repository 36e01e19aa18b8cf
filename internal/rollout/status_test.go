package rollout

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func TestNextStatus(t *testing.T) {
	t.Run("pod waiting for a claim names it", func(t *testing.T) {
		f := newFixture()
		f.o.Pod.Status.Phase = corev1.PodPending
		f.o.PendingClaims = []string{`PersistentVolumeClaim workspace-alice-0 is Pending: ProvisioningFailed: storageclass.storage.k8s.io "fast" not found`}
		st := nextStatus(f.o, decide(f.o))
		assertCondition(t, st, lullv1.ConditionReady, metav1.ConditionFalse, lullv1.ReasonClaimPending)
		for _, c := range st.Conditions {
			if c.Type == lullv1.ConditionReady && !strings.Contains(c.Message, "workspace-alice-0") {
				t.Errorf("Ready message %q does not name the claim", c.Message)
			}
		}
		f.o.Pod.Status.Phase = corev1.PodRunning // a claim is never blamed for a running pod
		assertCondition(t, nextStatus(f.o, decide(f.o)), lullv1.ConditionReady, metav1.ConditionTrue, "PodReady")
	})
	t.Run("drain requested", func(t *testing.T) {
		f := newFixture()
		f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
		a := decide(f.o)
		st := nextStatus(f.o, a)
		if st.Phase != lullv1.SessionDraining || st.Drain == nil || st.CurrentRevision != oldRev || st.UpdateRevision != newRev {
			t.Fatalf("status = %+v", st)
		}
		assertCondition(t, st, lullv1.ConditionUpToDate, metav1.ConditionFalse, lullv1.ReasonDraining)
		f.o.Session.Status = st
		again := nextStatus(f.o, decide(f.o))
		if !equality.Semantic.DeepEqual(again, st) {
			t.Errorf("waiting for the drain changed the status:\n%+v\nwas\n%+v", again, st)
		}
		assertCondition(t, st, lullv1.ConditionDraining, metav1.ConditionTrue, string(lullv1.DrainReasonUpdate))
		assertCondition(t, st, lullv1.ConditionActive, metav1.ConditionTrue, "TurnsInFlight")
		assertCondition(t, st, lullv1.ConditionReady, metav1.ConditionTrue, "PodReady")
		if st.Runtime == nil || st.Runtime.ActiveTurns != 1 {
			t.Errorf("runtime report changed: %+v", st.Runtime)
		}
	})
	t.Run("up to date resets the failure count", func(t *testing.T) {
		f := newFixture()
		f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
		f.o.Session.Status.FailedReplacements = 3
		st := nextStatus(f.o, decide(f.o))
		if st.Phase != lullv1.SessionRunning || st.FailedReplacements != 0 || st.Drain != nil {
			t.Fatalf("status = %+v", st)
		}
		assertCondition(t, st, lullv1.ConditionUpToDate, metav1.ConditionTrue, lullv1.ReasonUpToDate)
		assertCondition(t, st, lullv1.ConditionActive, metav1.ConditionUnknown, "NoReport")
	})
	t.Run("a committed failed replacement counts toward backoff, once", func(t *testing.T) {
		f := newFixture()
		f.o.Pod.Status.Phase = corev1.PodFailed
		a := decide(f.o)
		st := nextStatus(f.o, a)
		if st.FailedReplacements != 1 || st.LastFailedReplacementTime == nil || !st.LastFailedReplacementTime.Time.Equal(now) || st.Phase != lullv1.SessionPending || st.Replacement == nil {
			t.Fatalf("status = %+v", st)
		}
		f.o.Session.Status = st
		again := nextStatus(f.o, decide(f.o)) // the delete did not happen: finish it
		if again.FailedReplacements != 1 || again.Replacement == nil {
			t.Fatalf("finishing the commitment changed the count or dropped it: %+v", again)
		}
	})
	t.Run("a new request advances the drain sequence", func(t *testing.T) {
		f := newFixture()
		f.o.Session.Status.DrainSequence = 6
		st := nextStatus(f.o, decide(f.o))
		if st.DrainSequence != 7 || st.Drain == nil || st.Drain.Sequence != 7 {
			t.Fatalf("status = %+v", st)
		}
		f.o.Session.Status = st
		f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
		if st := nextStatus(f.o, decide(f.o)); st.DrainSequence != 7 || st.Drain != nil {
			t.Fatalf("withdrawing the request must keep the sequence: %+v", st)
		}
	})
	t.Run("a stuck terminating pod shows in UpToDate", func(t *testing.T) {
		f := newFixture()
		ts := metav1.NewTime(now.Add(-time.Hour))
		f.o.Pod.DeletionTimestamp = &ts
		st := nextStatus(f.o, decide(f.o))
		assertCondition(t, st, lullv1.ConditionUpToDate, metav1.ConditionFalse, lullv1.ReasonPodStuckTerminating)
	})
	t.Run("current failing pod shows Failed", func(t *testing.T) {
		f := newFixture()
		f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
		f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("CrashLoopBackOff")}
		st := nextStatus(f.o, decide(f.o))
		if st.Phase != lullv1.SessionFailed {
			t.Fatalf("phase = %s", st.Phase)
		}
		assertCondition(t, st, lullv1.ConditionReady, metav1.ConditionFalse, lullv1.ReasonPodFailed)
	})
	t.Run("transition time moves only when status changes", func(t *testing.T) {
		f := newFixture()
		st := nextStatus(f.o, decide(f.o))
		f.o.Session.Status = st
		f.o.Now = now.Add(time.Minute)
		again := nextStatus(f.o, decide(f.o))
		for _, c := range again.Conditions {
			if !c.LastTransitionTime.Time.Equal(now) {
				t.Errorf("%s transition time moved to %s", c.Type, c.LastTransitionTime)
			}
		}
	})
}

func assertCondition(t *testing.T, st lullv1.SessionStatus, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	for _, c := range st.Conditions {
		if c.Type == typ {
			if c.Status != status || c.Reason != reason {
				t.Errorf("%s = %s/%s (%s), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
			}
			if strings.TrimSpace(c.Message) == "" {
				t.Errorf("%s has no message", typ)
			}
			return
		}
	}
	t.Errorf("no %s condition in %+v", typ, st.Conditions)
}
