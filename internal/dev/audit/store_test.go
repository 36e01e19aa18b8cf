package audit

import (
	"context"
	"strings"
	"testing"

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
