package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A StatefulSet scaled to 0 by hand, its runtime image set by hand, is
// restored on the real API server, whose defaulting fills in what lull
// leaves unset, with a DriftCorrected Event naming the field; restored, it
// is left alone: no write loop against the API server's copy.
func TestHandEditedStatefulSetIsRestoredOnce(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	ctx := t.Context()
	n := runs.Add(1)
	tpl := newTemplate(ns, fmt.Sprintf("stsdrift-tpl%d", n), "example.com/runtime:v1")
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("stsdrift-s%d", n), tpl.Name)
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: s.Name}
	sts := &appsv1.StatefulSet{}
	// A create claims generation 1 without the UID, which the API server
	// assigns; the response shows it and a metadata-only write corrects
	// the record (specWrittenClaim). Settled means that write has landed.
	eventually(t, 10*time.Second, "the StatefulSet rendered and its record corrected", func(ctx context.Context) error {
		if err := admin.Get(ctx, key, sts); err != nil {
			return err
		}
		if rec, want := sts.Annotations[lullv1.AnnotationSpecWritten], "/"+string(sts.UID); !strings.HasSuffix(rec, want) {
			return fmt.Errorf("record %s=%q names no UID %s yet", lullv1.AnnotationSpecWritten, rec, sts.UID)
		}
		return nil
	})
	// Settled: nothing rewrites what the API server defaulted.
	rv := sts.ResourceVersion
	time.Sleep(2 * time.Second)
	if err := admin.Get(ctx, key, sts); err != nil {
		t.Fatal(err)
	}
	if sts.ResourceVersion != rv {
		t.Fatalf("a StatefulSet nobody edited was written again: resourceVersion %s → %s", rv, sts.ResourceVersion)
	}

	edits := []struct{ what, patch, field string }{
		{"scaled to 0", `{"spec":{"replicas":0}}`, "spec.replicas is 0"},
		{"image set", fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":%q,"image":"example.com/other:1"}]}}}}`, lullv1.RuntimeContainerName),
			"containers[" + lullv1.RuntimeContainerName + "].image"},
	}
	for i, edit := range edits {
		if err := admin.Patch(ctx, &appsv1.StatefulSet{ObjectMeta: sts.ObjectMeta}, client.RawPatch(types.StrategicMergePatchType, []byte(edit.patch))); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "restored after "+edit.what, func(ctx context.Context) error {
			if err := admin.Get(ctx, key, sts); err != nil {
				return err
			}
			if r := sts.Spec.Replicas; r == nil || *r != 1 {
				return fmt.Errorf("replicas %v", r)
			}
			if img := runtimeContainer(t, sts).Image; img != "example.com/runtime:v1" {
				return fmt.Errorf("image %s", img)
			}
			// A restore claims the lower generation and corrects its
			// record in a second, metadata-only write once the response
			// shows the spec moved (specWrittenClaim): settled means both
			// have landed.
			if rec, want := sts.Annotations[lullv1.AnnotationSpecWritten], strconv.FormatInt(sts.Generation, 10)+"/"; !strings.HasPrefix(rec, want) {
				return fmt.Errorf("record %s=%q, generation %d", lullv1.AnnotationSpecWritten, rec, sts.Generation)
			}
			return nil
		})
		rv := sts.ResourceVersion
		time.Sleep(2 * time.Second)
		if err := admin.Get(ctx, key, sts); err != nil {
			t.Fatal(err)
		}
		if sts.ResourceVersion != rv {
			t.Errorf("restored StatefulSet written again after %s: resourceVersion %s → %s", edit.what, rv, sts.ResourceVersion)
		}
		// Listed after the 2 s above, by which the recorder has long sent it.
		var list eventsv1.EventList
		if err := admin.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range list.Items {
			if e.Regarding.Name == s.Name && e.Reason == lullv1.ReasonDriftCorrected {
				got = append(got, e.Note) // each restore names another field: its own Event
			}
		}
		// The recorder folds a second Event of the same reason on the same
		// Session into the first one's series (events.k8s.io) while the
		// Session's resourceVersion, part of the series' key, is the same;
		// a status write between the restores starts a new one. So the
		// Events are the first restore's, and after it the later ones' or
		// none, in order.
		ok := len(got) >= 1 && len(got) <= i+1
		for j := range got {
			ok = ok && strings.Contains(got[j], edits[j].field)
		}
		if !ok {
			t.Errorf("after %s: DriftCorrected Events %q, want the first restore's, then at most one per later restore", edit.what, got)
		}
	}
}
