package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// The auditor reads pods and sessions from etcd, below the API server, not
// through the API server's watch. An API server restart closes every watch,
// and a watch resumed on the new server starts from its fresh watch cache:
// versions written in between are never delivered, the client relists, and
// a Drained report written and superseded inside that window, or a pod
// created and deleted inside it, is lost to a watcher. etcd keeps every
// revision until the API server compacts it (every 5 minutes by default,
// keeping at least that much history), and the etcd client resumes its
// watch from the last revision it delivered, so the auditor sees every
// write once, in revision order, whatever happens to the API server. The
// revision of a write is the resourceVersion the API server gives it.
//
// The keys are the API server's defaults (--etcd-prefix=/registry): core
// objects under /registry/<resource>/, custom resources under
// /registry/<group>/<resource>/. Core objects are stored as Kubernetes
// protobuf, custom resources as JSON.
var (
	podsPrefix     = "/registry/pods/"
	sessionsPrefix = "/registry/" + lullv1.GroupVersion.Group + "/sessions/"
)

// store decodes the objects the auditor reads from etcd.
type store struct {
	pods runtime.Decoder
}

func newStore(scheme *runtime.Scheme) store {
	return store{pods: protobuf.NewSerializer(scheme, scheme)}
}

// pod decodes a pod stored at revision rev; its resourceVersion is rev.
func (st store) pod(value []byte, rev int64) (*corev1.Pod, error) {
	obj, _, err := st.pods.Decode(value, nil, &corev1.Pod{})
	if err != nil {
		return nil, err
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("decoded a %T, not a Pod", obj)
	}
	pod.ResourceVersion = strconv.FormatInt(rev, 10)
	return pod, nil
}

// session decodes a session stored at revision rev; its resourceVersion is
// rev.
func (st store) session(value []byte, rev int64) (*lullv1.Session, error) {
	var s lullv1.Session
	if err := json.Unmarshal(value, &s); err != nil {
		return nil, err
	}
	s.ResourceVersion = strconv.FormatInt(rev, 10)
	return &s, nil
}

// watchStore lists the pods and sessions in etcd at etcdURL, feeds them to
// the auditor, and watches both from the next revision until ctx is done.
// It returns once the listing is fed; an error after that (history
// compacted away, a watch the server cancelled) is kept and fails Check.
func (a *Auditor) watchStore(ctx context.Context, etcdURL string, st store) error {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{etcdURL},
		DialTimeout: 10 * time.Second,
		Context:     ctx,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return fmt.Errorf("audit: connect to etcd at %s: %w", etcdURL, err)
	}
	pods, err := cli.Get(ctx, podsPrefix, clientv3.WithPrefix())
	if err != nil {
		_ = cli.Close()
		return fmt.Errorf("audit: list pods in etcd: %w", err)
	}
	rev := pods.Header.Revision
	sessions, err := cli.Get(ctx, sessionsPrefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		_ = cli.Close()
		return fmt.Errorf("audit: list sessions in etcd: %w", err)
	}
	now := time.Now()
	for _, kv := range sessions.Kvs {
		a.feedSession(st, kv.Value, kv.ModRevision, now)
	}
	for _, kv := range pods.Kvs {
		a.feedPod(st, kv.Value, kv.ModRevision, false, now)
	}
	a.delivered(watchPods, rev)
	a.delivered(watchSessions, rev)
	// Each prefix gets its own watch: the rules order writes by revision,
	// not by arrival, so the two need not be merged; but one may lag the
	// other, so Check first waits for both to reach etcd's revision
	// (catchUp). Both share one context, hence one gRPC stream, which a
	// progress request asks about.
	wctx := clientv3.WithRequireLeader(ctx)
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithRev(rev + 1), clientv3.WithPrevKV()}
	podWatch := cli.Watch(wctx, podsPrefix, opts...)
	sessionWatch := cli.Watch(wctx, sessionsPrefix, opts...)
	a.mu.Lock()
	a.catchUp = func(ctx context.Context) error { return a.waitDelivered(ctx, cli, wctx) }
	a.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { a.follow(ctx, podWatch, watchPods, st); done <- struct{}{} }()
	go func() { a.follow(ctx, sessionWatch, watchSessions, st); done <- struct{}{} }()
	go func() {
		<-done
		<-done
		_ = cli.Close()
	}()
	return nil
}

// follow feeds every event of one watch to the auditor until the watch
// ends. A watch that ends before ctx is done lost history: that is kept.
func (a *Auditor) follow(ctx context.Context, w clientv3.WatchChan, what string, st store) {
	for resp := range w {
		if err := resp.Err(); err != nil {
			a.lose(fmt.Errorf("audit: the watch of %s in etcd ended at revision %d: %w", what, resp.Header.GetRevision(), err))
			return
		}
		now := time.Now()
		for _, ev := range resp.Events {
			switch {
			case ev.Type == clientv3.EventTypeDelete && what == "pods" && ev.PrevKv == nil:
				// etcd sends no previous value when that version has left
				// its history: whose pod went, and whether it had drained,
				// cannot be told, so the run cannot be judged.
				a.lose(fmt.Errorf("audit: pod %s was removed at revision %d without its last version", ev.Kv.Key, ev.Kv.ModRevision))
			case ev.Type == clientv3.EventTypeDelete && what == "pods":
				// The pod as last stored, at the revision of its removal.
				a.feedPod(st, ev.PrevKv.Value, ev.Kv.ModRevision, true, now)
			case ev.Type == clientv3.EventTypeDelete:
				// A session's removal: nothing to judge.
			case what == "pods":
				a.feedPod(st, ev.Kv.Value, ev.Kv.ModRevision, false, now)
			default:
				a.feedSession(st, ev.Kv.Value, ev.Kv.ModRevision, now)
			}
		}
		// Every event up to the response's revision is delivered (for a
		// progress notification too: it carries no events).
		a.delivered(what, resp.Header.GetRevision())
	}
	if ctx.Err() == nil {
		a.lose(fmt.Errorf("audit: the watch of %s in etcd closed", what))
	}
}

func (a *Auditor) feedPod(st store, value []byte, rev int64, gone bool, now time.Time) {
	pod, err := st.pod(value, rev)
	if err != nil {
		a.lose(fmt.Errorf("audit: decode a pod at revision %d: %w", rev, err))
		return
	}
	a.observePod(pod, gone, now)
}

func (a *Auditor) feedSession(st store, value []byte, rev int64, now time.Time) {
	s, err := st.session(value, rev)
	if err != nil {
		a.lose(fmt.Errorf("audit: decode a session at revision %d: %w", rev, err))
		return
	}
	a.observeSession(s, now)
}

// The auditor's two watches of etcd.
const (
	watchPods     = "pods"
	watchSessions = "sessions"
)

// delivered records that the watch of what has delivered every event up
// to revision rev.
func (a *Auditor) delivered(what string, rev int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if rev > a.upTo[what] {
		a.upTo[what] = rev
	}
}

// waitDelivered waits until both watches have delivered every write etcd
// had made when it was called, asking etcd for progress notifications on
// the watches' stream (wctx) while they have no event to send: writes to
// other keys move etcd's revision past the last event they delivered.
func (a *Auditor) waitDelivered(ctx context.Context, cli *clientv3.Client, wctx context.Context) error {
	now, err := cli.Get(ctx, podsPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("audit: read etcd's revision: %w", err)
	}
	return a.waitUpTo(ctx, now.Header.GetRevision(), func() error { return cli.RequestProgress(wctx) })
}

// waitUpTo waits until both watches have delivered every event up to
// revision target, calling progress every 20 ms until then. An error when
// ctx ends first: a verdict then could miss a write made before a deletion
// it judges.
func (a *Auditor) waitUpTo(ctx context.Context, target int64, progress func() error) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		a.mu.Lock()
		pods, sessions := a.upTo[watchPods], a.upTo[watchSessions]
		a.mu.Unlock()
		if pods >= target && sessions >= target {
			return nil
		}
		if err := progress(); err != nil {
			return fmt.Errorf("audit: ask etcd for the watches' progress: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("audit: the watches of etcd had not reached revision %d (pods at %d, sessions at %d): %w", target, pods, sessions, ctx.Err())
		case <-tick.C:
		}
	}
}

// lose records that the auditor missed something; Check then fails.
func (a *Auditor) lose(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lost = append(a.lost, err.Error())
}

// lostErr returns what the auditor missed, or nil.
func (a *Auditor) lostErr() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.lost) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(a.lost, "; "))
}
