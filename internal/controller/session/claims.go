package session

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// ClaimName is the name the StatefulSet controller gives a session's claim
// made from the claim template named template: <template>-<session>-0.
func ClaimName(template, session string) string { return template + "-" + session + "-0" }

// pendingClaims describes the session's claims that keep its pod from
// starting: one not created yet, or one Pending, with the newest Warning
// Event about it (an unknown StorageClass, a provisioner that failed). It
// reads the API server, not a cache, and only while the session has no
// running pod, so sessions that run cost nothing.
func pendingClaims(ctx context.Context, r client.Reader, s *lullv1.Session, t *lullv1.SessionTemplate, pod *corev1.Pod) ([]string, error) {
	if len(t.Spec.VolumeClaimTemplates) == 0 || s.Spec.Suspend || (pod != nil && pod.Status.Phase != corev1.PodPending) {
		return nil, nil
	}
	var out []string
	for _, ct := range t.Spec.VolumeClaimTemplates {
		name := ClaimName(ct.Name, s.Name)
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: name}, pvc)
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, fmt.Sprintf("PersistentVolumeClaim %s is not created yet", name))
			continue
		case err != nil:
			return nil, err
		}
		if pvc.Status.Phase != corev1.ClaimPending {
			continue
		}
		msg := fmt.Sprintf("PersistentVolumeClaim %s is Pending", name)
		if ev, err := lastWarning(ctx, r, pvc); err != nil {
			return nil, err
		} else if ev != nil {
			msg += fmt.Sprintf(": %s: %s", ev.Reason, ev.Message)
		}
		out = append(out, msg+fmt.Sprintf(" (kubectl describe pvc %s -n %s)", name, s.Namespace))
	}
	return out, nil
}

// lastWarning returns the newest Warning Event about a claim, or nil.
func lastWarning(ctx context.Context, r client.Reader, pvc *corev1.PersistentVolumeClaim) (*corev1.Event, error) {
	var events corev1.EventList
	err := r.List(ctx, &events, client.InNamespace(pvc.Namespace), client.MatchingFieldsSelector{Selector: fields.SelectorFromSet(fields.Set{
		"involvedObject.kind": "PersistentVolumeClaim", "involvedObject.name": pvc.Name, "involvedObject.uid": string(pvc.UID), "type": corev1.EventTypeWarning,
	})})
	if err != nil {
		if apierrors.IsForbidden(err) {
			return nil, nil // the claim is still named; its events are a courtesy
		}
		return nil, err
	}
	if len(events.Items) == 0 {
		return nil, nil
	}
	sort.Slice(events.Items, func(i, j int) bool { return eventTime(&events.Items[i]).Before(eventTime(&events.Items[j])) })
	return &events.Items[len(events.Items)-1], nil
}

func eventTime(e *corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
