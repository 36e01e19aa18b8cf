package audit

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestPodRemovedWithoutItsLastVersionFailsCheck: etcd gives a delete event
// without its previous value when that value is no longer in its history.
// The auditor cannot tell whose pod went, nor judge it: Check must fail,
// not let the deletion pass unjudged as if it were a session's.
func TestPodRemovedWithoutItsLastVersionFailsCheck(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	a := newAuditor()
	w := make(chan clientv3.WatchResponse, 1)
	w <- clientv3.WatchResponse{Events: []*clientv3.Event{{
		Type: mvccpb.DELETE,
		Kv:   &mvccpb.KeyValue{Key: []byte(podsPrefix + "default/s-0"), ModRevision: 42},
	}}}
	close(w)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the watch's end is the test's, not lost history
	a.follow(ctx, w, "pods", newStore(scheme))

	_, err = a.Check(t.TempDir(), "")
	if err == nil || !strings.Contains(err.Error(), podsPrefix+"default/s-0") || !strings.Contains(err.Error(), "42") {
		t.Fatalf("Check after a pod removal without its last version: err %v, want one naming the key and revision", err)
	}
}

// Check judges nothing before both watches have delivered every write etcd
// had made: a lagging session watch could otherwise hide a withdrawal
// written before a deletion. waitUpTo returns once the lagging watch
// catches up (here by a progress notification), and fails, naming the
// revisions, when it never does; Check passes that failure on.
func TestCheckWaitsForBothWatches(t *testing.T) {
	a := newAuditor()
	a.delivered(watchPods, 10)
	a.delivered(watchSessions, 5)
	asked := 0
	progress := func() error {
		if asked++; asked == 3 {
			go a.delivered(watchSessions, 12) // a progress notification
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.waitUpTo(ctx, 10, progress); err != nil {
		t.Fatalf("waitUpTo after the session watch caught up: %v", err)
	}
	if asked < 3 {
		t.Errorf("waitUpTo returned after %d progress requests, before the session watch caught up", asked)
	}

	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	err := a.waitUpTo(short, 20, func() error { return nil })
	if err == nil || !strings.Contains(err.Error(), "revision 20") || !strings.Contains(err.Error(), "sessions at 12") {
		t.Fatalf("waitUpTo on watches that never arrive: %v, want an error naming the revisions", err)
	}

	a.catchUp = func(ctx context.Context) error { return a.waitUpTo(ctx, 20, func() error { return nil }) }
	saved := catchUpTimeout
	t.Cleanup(func() { catchUpTimeout = saved })
	catchUpTimeout = 100 * time.Millisecond
	if _, err := a.Check(t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "cannot be judged") {
		t.Fatalf("Check with lagging watches: %v, want it refused", err)
	}
}
