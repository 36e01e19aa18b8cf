// Package index names the field indexes of the manager's cache that lull's
// controllers read, with the function that computes each, as Cluster API's
// internal/index does: a controller lists through an index by its name
// here, whoever registered it, so no controller depends on another for it.
//
// AddDefaultIndexes registers the indexes more than one controller reads;
// an index one controller alone reads over kinds it chooses (SessionLabel)
// is registered by that controller's setup with the function named here.
package index

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// SessionTemplateName indexes Sessions by spec.templateRef.name, so a
// template's change finds its sessions in the cache (the session
// controller re-renders them; the template controller counts them).
const SessionTemplateName = "spec.templateRef.name"

// SessionLabel indexes the objects lull makes for a session (and their
// pods and claims) by the value of their lull.dev/session label, so the
// session controller's reaper finds a name's objects without scanning the
// namespace.
const SessionLabel = "metadata.labels." + lullv1.LabelSession

// PodNodeName indexes the cached session pods by spec.nodeName, so a
// change of a Node (cordoned, tainted by a drain) finds the sessions whose
// pods run on it.
const PodNodeName = "spec.nodeName"

// PodNodeNameOf is PodNodeName's value for o, a *corev1.Pod: its
// spec.nodeName, or none while it is not scheduled.
func PodNodeNameOf(o client.Object) []string {
	if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
		return []string{n}
	}
	return nil
}

// BudgetOwner indexes the cached PodDisruptionBudgets by whose they are:
// BudgetOfSession for one a Session controls (lull's own, one per session),
// BudgetOfOther for any other. A session's reconcile lists only the others
// of its namespace, to find those that also select its pod, without
// walking every session's budget.
const BudgetOwner = "metadata.budgetOwner"

// The values of BudgetOwner.
const (
	BudgetOfSession = "session"
	BudgetOfOther   = "other"
)

// BudgetOwnerOf is BudgetOwner's value for o, a PodDisruptionBudget.
func BudgetOwnerOf(o client.Object) []string {
	for _, ref := range o.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller && ref.Kind == "Session" && ref.APIVersion == lullv1.GroupVersion.String() {
			return []string{BudgetOfSession}
		}
	}
	return []string{BudgetOfOther}
}

// SessionTemplateNameOf is SessionTemplateName's value for o, a
// *lullv1.Session: its spec.templateRef.name.
func SessionTemplateNameOf(o client.Object) []string {
	return []string{o.(*lullv1.Session).Spec.TemplateRef.Name}
}

// SessionLabelOf is SessionLabel's value for o: its lull.dev/session label,
// or none when it has no such label.
func SessionLabelOf(o client.Object) []string {
	if name, ok := o.GetLabels()[lullv1.LabelSession]; ok {
		return []string{name}
	}
	return nil
}

// AddDefaultIndexes registers on indexer (the manager's field indexer) the
// indexes that more than one controller reads: SessionTemplateName. It is
// called once, before the controllers are set up; a second registration of
// the same index is an error (the cache refuses an index it already has).
func AddDefaultIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &lullv1.Session{}, SessionTemplateName, SessionTemplateNameOf)
}
