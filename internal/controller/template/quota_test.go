package template

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

func quota(hard, used string) *corev1.ResourceQuota {
	q := &corev1.ResourceQuota{}
	q.Spec.Hard = corev1.ResourceList{"count/configmaps": resource.MustParse(hard)}
	q.Status.Used = corev1.ResourceList{"count/configmaps": resource.MustParse(used)}
	return q
}

func withStatusHard(q *corev1.ResourceQuota, hard string) *corev1.ResourceQuota {
	q.Status.Hard = corev1.ResourceList{"count/configmaps": resource.MustParse(hard)}
	return q
}

// Only a quota change that can admit one more ConfigMap wakes the refused
// templates: not the recounts the quota controller writes on every create.
func TestQuotaMayAdmitMore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new *corev1.ResourceQuota
		want     bool
	}{
		{"created", nil, quota("2", "2"), true},
		{"deleted", quota("2", "2"), nil, true},
		{"limit raised", quota("2", "2"), quota("100", "2"), true},
		{"limit raised in status (what admission enforces)", quota("2", "2"), withStatusHard(quota("2", "2"), "100"), true},
		{"a ConfigMap freed", quota("2", "2"), quota("2", "1"), true},
		{"a ConfigMap counted", quota("3", "1"), quota("3", "2"), false},
		{"an unrelated recount", quota("2", "2"), quota("2", "2"), false},
	} {
		if got := QuotaMayAdmitMore(tc.old, tc.new); got != tc.want {
			t.Errorf("%s: QuotaMayAdmitMore = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A quota change makes the next try of a refused ConfigMap due at once in
// its namespace only, and keeps the count of refusals, so a quota still too
// small goes on backing off from where it was. The try it woke, if refused,
// gets one more a second later: the API server's quota admission reads its
// own cache of quotas, which can lag the change the controller watched (a
// TestFilesQuota run failed so, refused after the raise and then waiting
// 16 s).
func TestQuotaChangeRetriesRefusedFilesNow(t *testing.T) {
	var b filesBackoff
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	here := filesKey{types.NamespacedName{Namespace: "team-a", Name: "agent"}, "a-1"}
	there := filesKey{types.NamespacedName{Namespace: "team-b", Name: "agent"}, "b-1"}
	for range 8 { // backed off to 128 s
		b.failed(here, "agent-files-1", now)
		b.failed(there, "agent-files-2", now)
	}
	b.succeeded(filesKey{types.NamespacedName{Namespace: "team-a", Name: "ok"}, "ok-1"}, "ok-files-3", true)
	if _, waiting := b.pending(here, "agent-files-1", now.Add(time.Minute)); !waiting {
		t.Fatal("a template refused 8 times is not backing off")
	}

	keys := b.retryNow("team-a")
	if len(keys) != 1 || keys[0] != here.NamespacedName {
		t.Fatalf("retryNow(team-a) = %v, want only %v (not a template whose files exist, not another namespace)", keys, here)
	}
	if _, waiting := b.pending(here, "agent-files-1", now.Add(time.Minute)); waiting {
		t.Error("after a quota change the refused template still waits for its backoff")
	}
	if _, waiting := b.pending(there, "agent-files-2", now.Add(time.Minute)); !waiting {
		t.Error("a quota change in team-a cut the backoff of a template in team-b")
	}
	if next := b.failed(here, "agent-files-1", now); next.Sub(now) != filesFirstRetry {
		t.Errorf("the try a quota change woke, refused, is tried again after %s, want %s", next.Sub(now), filesFirstRetry)
	}
	if next := b.failed(here, "agent-files-1", now); next.Sub(now) != FilesRetryAfter(10) {
		t.Errorf("the refusal after that waits %s, want %s (the count kept)", next.Sub(now), FilesRetryAfter(10))
	}
}
