package orphan

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

var (
	created = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	sessGVK = lullv1.GroupVersion.WithKind("Session")
	stsGVK  = appsv1.SchemeGroupVersion.WithKind("StatefulSet")
)

func sess(uid types.UID) *lullv1.Session {
	return &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x", UID: uid, CreationTimestamp: metav1.NewTime(created)}}
}

// meta returns the metadata of an object labelled for session x with the
// given controller (nil: none) and lull.dev/session-uid label ("" : none).
func meta(name string, uid types.UID, controller *metav1.OwnerReference, labelUID string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid, Labels: map[string]string{lullv1.LabelSession: "x"}, CreationTimestamp: metav1.NewTime(created.Add(time.Minute))}
	if labelUID != "" {
		m.Labels[lullv1.LabelSessionUID] = labelUID
	}
	if controller != nil {
		m.OwnerReferences = []metav1.OwnerReference{*controller}
	}
	return m
}

func ptrTrue() *bool { b := true; return &b }

func bySession(uid types.UID) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: sessGVK.GroupVersion().String(), Kind: "Session", Name: "x", UID: uid, Controller: ptrTrue()}
}

func bySTS(uid types.UID) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: stsGVK.GroupVersion().String(), Kind: "StatefulSet", Name: "x", UID: uid, Controller: ptrTrue()}
}

func byOther(kind string, uid types.UID) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: "example.com/v1", Kind: kind, Name: "x", UID: uid, Controller: ptrTrue()}
}

func sts(uid types.UID, c *metav1.OwnerReference, labelUID string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: meta("x", uid, c, labelUID)}
}

func pod(uid types.UID, c *metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: meta("x-0", uid, c, "")}
}

func claim(uid types.UID, c *metav1.OwnerReference, at time.Time) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: meta("work-x-0", uid, c, "")}
	pvc.CreationTimestamp = metav1.NewTime(at)
	return pvc
}

func terminating[T client.Object](o T) T {
	now := metav1.NewTime(created)
	o.SetDeletionTimestamp(&now)
	return o
}

// verdicts renders Judge's answer as "Kind/name=Fate(predecessor)".
func verdicts(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%s/%s=%s(%s)", f.Kind, f.Object.GetName(), f.Fate, f.Predecessor))
	}
	return out
}

func TestJudge(t *testing.T) {
	cur, old := types.UID("cur"), types.UID("old")
	before, after := created.Add(-time.Hour), created.Add(time.Hour)
	live := sess(cur)
	withPod := sess(cur)
	withPod.Status.PodUID = "pod-own"
	for _, tc := range []struct {
		name    string
		session *lullv1.Session
		objs    []client.Object
		want    []string
	}{
		{"a live session's own objects are left alone", live, []client.Object{
			&corev1.ServiceAccount{ObjectMeta: meta("lull-runtime-x", "sa", bySession(cur), string(cur))},
			&rbacv1.Role{ObjectMeta: meta("lull-runtime-x", "r", bySession(cur), string(cur))},
			&rbacv1.RoleBinding{ObjectMeta: meta("lull-runtime-x", "rb", bySession(cur), string(cur))},
			&corev1.Service{ObjectMeta: meta("x", "svc", bySession(cur), string(cur))},
			sts("sts", bySession(cur), string(cur)),
			pod("p", bySTS("sts")),
			claim("c", bySTS("sts"), after),
			claim("retained-own", nil, after),
		}, nil},
		{"a predecessor's objects (owner of another UID) are reaped when the name is recreated", live, []client.Object{
			&corev1.ServiceAccount{ObjectMeta: meta("lull-runtime-x", "sa", bySession(old), "")},
			&corev1.Service{ObjectMeta: meta("x", "svc", nil, string(old))},
			sts("sts-old", nil, string(old)),
			pod("p", bySTS("sts-old")),
			claim("c", bySTS("sts-old"), before),
		}, []string{"ServiceAccount/lull-runtime-x=Reap(old)", "Service/x=Reap(old)", "Pod/x-0=Reap(old)", "PersistentVolumeClaim/work-x-0=Reap(old)", "StatefulSet/x=Reap(old)"}},
		{"a pod without a controller from before the Session is reaped: the new StatefulSet would adopt it", live, []client.Object{
			func() *corev1.Pod { p := pod("p-old", nil); p.CreationTimestamp = metav1.NewTime(before); return p }(),
		}, []string{"Pod/x-0=Reap()"}},
		{"a pod whose StatefulSet is gone is reaped while a Session of the name exists", live, []client.Object{
			pod("p-old", bySTS("gone")),
		}, []string{"Pod/x-0=Reap()"}},
		{"a live session's own pod without a controller (its StatefulSet orphaned it) is kept", withPod, []client.Object{
			pod("pod-own", nil),
		}, nil},
		{"a pod without a controller created after the Session is its own, not yet in its status", live, []client.Object{
			pod("pod-new", nil),
		}, nil},
		{"a pod without a controller created before the Session is a predecessor's", live, []client.Object{
			func() *corev1.Pod { p := pod("pod-old", nil); p.CreationTimestamp = metav1.NewTime(before); return p }(),
		}, []string{"Pod/x-0=Reap()"}},
		{"a live session's own object that lost its owner reference is restored, not reaped", live, []client.Object{
			sts("sts", nil, string(cur)),
			&rbacv1.Role{ObjectMeta: meta("lull-runtime-x", "r", nil, string(cur))},
			pod("p", bySTS("sts")),
		}, []string{"Role/lull-runtime-x=RestoreOwner(cur)", "StatefulSet/x=RestoreOwner(cur)"}},
		{"an object without owner or lull.dev/session-uid from before the Session is an orphan", live, []client.Object{
			func() *corev1.Service {
				svc := &corev1.Service{ObjectMeta: meta("x", "svc", nil, "")}
				svc.CreationTimestamp = metav1.NewTime(before)
				return svc
			}(),
		}, []string{"Service/x=Reap()"}},
		{"objects controlled by a kind lull never sets are someone else's", live, []client.Object{
			&corev1.Service{ObjectMeta: meta("x", "svc", byOther("Thing", "t"), "")},
			pod("p", byOther("ReplicaSet", "rs")),
			claim("c", byOther("Thing", "t"), before),
		}, nil},
		{"a claim owned by a scaled-down pod (WhenScaled=Delete) is left to the garbage collector", live, []client.Object{
			claim("c", &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "x-0", UID: "p", Controller: ptrTrue()}, before),
		}, nil},
		{"a predecessor's retained claim (no owner: WhenDeleted=Retain) is reused, and said so", live, []client.Object{
			claim("c", nil, before),
		}, []string{"PersistentVolumeClaim/work-x-0=ReuseClaim()"}},
		{"objects already being deleted are waited for, not deleted again", live, []client.Object{
			terminating(sts("sts-old", nil, string(old))),
			terminating(pod("p", bySTS("sts-old"))),
		}, []string{"Pod/x-0=Terminating(old)", "StatefulSet/x=Terminating(old)"}},
		{"no Session: objects without a controller are reaped with the pods and claims of their StatefulSet", nil, []client.Object{
			&corev1.ServiceAccount{ObjectMeta: meta("lull-runtime-x", "sa", nil, string(old))},
			sts("sts-old", nil, string(old)),
			pod("p", bySTS("sts-old")),
			claim("c", bySTS("sts-old"), before),
			claim("retained", nil, before),
		}, []string{"ServiceAccount/lull-runtime-x=Reap(old)", "Pod/x-0=Reap(old)", "PersistentVolumeClaim/work-x-0=Reap(old)", "StatefulSet/x=Reap(old)"}},
		{"no Session: a pod left without a controller is reaped", nil, []client.Object{
			pod("p", nil),
		}, []string{"Pod/x-0=Reap()"}},
		{"no Session: objects whose owner is gone are the garbage collector's (an ordinary cascading delete)", nil, []client.Object{
			&corev1.Service{ObjectMeta: meta("x", "svc", bySession(old), string(old))},
			sts("sts-old", bySession(old), string(old)),
			pod("p", bySTS("sts-old")),
			pod("p2", bySTS("gone")),
			claim("c", bySTS("sts-old"), before),
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := verdicts(Judge(Observed{Session: tc.session, Objects: tc.objs}))
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("Judge:\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestOrphaned(t *testing.T) {
	for fate, want := range map[Fate]bool{Reap: true, Terminating: true, RestoreOwner: false, ReuseClaim: false} {
		if got := (Finding{Fate: fate}).Orphaned(); got != want {
			t.Errorf("Finding{Fate: %s}.Orphaned() = %v, want %v", fate, got, want)
		}
	}
}
