package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func init() { subcommands = append(subcommands, newSuspendCommand, newResumeCommand) }

func newSuspendCommand() *cobra.Command {
	var k kubeFlags
	cmd := &cobra.Command{
		Use:   "suspend SESSION",
		Short: "Suspend a session: drain its runtime, then scale its pod to zero, keeping its workspace",
		Long: `Set spec.suspend=true on a session. Its runtime is asked to drain first
(reason Manual): it accepts no new turn and finishes the ones it holds.
Once it reports Drained, the session's pod is scaled to zero; its
workspace claims are kept. lull resume starts it again.`,
		Args: cobra.ExactArgs(1),
		RunE: onSession(&k, suspendSession),
	}
	k.bind(cmd)
	return cmd
}

func newResumeCommand() *cobra.Command {
	var k kubeFlags
	cmd := &cobra.Command{
		Use:   "resume SESSION",
		Short: "Resume a suspended session, or keep one being culled for inactivity",
		Long: `Set spec.suspend=false on a session: a suspended session gets its pod
back, with its workspace.

A session being drained because it was idle (status.drain.reason Idle) is
kept too: in the same patch, the annotation lull.dev/keep-alive names that
drain request, and the controller withdraws it and restarts the idle clock.
Once the controller has committed to the drained pod's replacement
(status.replacement names the request) it is too late to keep the pod: run
lull resume again once the session shows Suspended.`,
		Args: cobra.ExactArgs(1),
		RunE: onSession(&k, resumeSession),
	}
	k.bind(cmd)
	return cmd
}

// suspendSession sets spec.suspend=true on the session ns/name and says
// what it did.
func suspendSession(ctx context.Context, c client.Client, ns, name string) (string, error) {
	s, err := getSession(ctx, c, ns, name)
	if err != nil {
		return "", err
	}
	switch {
	case s.Spec.Suspend && s.Status.Phase == lullv1.SessionSuspended:
		return fmt.Sprintf("session %s/%s: already suspended", ns, name), nil
	case s.Spec.Suspend:
		return fmt.Sprintf("session %s/%s: suspend already requested; its runtime drains first", ns, name), nil
	}
	if err := patchSession(ctx, c, s, map[string]any{"spec": map[string]any{"suspend": true}}); err != nil {
		return "", err
	}
	return fmt.Sprintf("session %s/%s: suspend requested; its runtime drains first, then its pod is scaled to zero (its workspace is kept)", ns, name), nil
}

// resumeSession sets spec.suspend=false on the session ns/name and, if an
// Idle drain request is outstanding and not yet committed, names it in
// lull.dev/keep-alive in the same patch. It says what it did, or returns an
// error saying why the session cannot be kept.
//
// The keep-alive patch carries the resourceVersion it was decided on: if
// the controller commits the drained pod's replacement in between, the
// keep-alive would withdraw nothing, so the patch is refused and the
// session read again.
func resumeSession(ctx context.Context, c client.Client, ns, name string) (string, error) {
	for attempt := 1; ; attempt++ {
		msg, err := resumeOnce(ctx, c, ns, name)
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		return msg, err
	}
}

func resumeOnce(ctx context.Context, c client.Client, ns, name string) (string, error) {
	s, err := getSession(ctx, c, ns, name)
	if err != nil {
		return "", err
	}
	idle, committed := idleDrain(s)
	suspended := s.Spec.Suspend // the patch updates s
	switch {
	case idle != "" && !committed:
		patch := map[string]any{
			"spec": map[string]any{"suspend": false},
			"metadata": map[string]any{"annotations": map[string]string{lullv1.AnnotationKeepAlive: idle},
				"resourceVersion": s.ResourceVersion},
		}
		if err := patchSession(ctx, c, s, patch); err != nil {
			return "", err
		}
		if suspended {
			return fmt.Sprintf("session %s/%s: resumed; idle drain %s withdrawn", ns, name, idle), nil
		}
		return fmt.Sprintf("session %s/%s: idle drain %s withdrawn", ns, name, idle), nil
	case suspended:
		if err := patchSession(ctx, c, s, map[string]any{"spec": map[string]any{"suspend": false}}); err != nil {
			return "", err
		}
		return fmt.Sprintf("session %s/%s: resumed", ns, name), nil
	case idle != "" && s.Annotations[lullv1.AnnotationIdleSuspended] == idle:
		// The cull suspended the session, and it was resumed before its
		// pod was scaled away: the controller replaces the drained pod,
		// and the session keeps running.
		return fmt.Sprintf("session %s/%s: already resumed; its pod, drained for idle drain %s, is being replaced and the session keeps running", ns, name, idle), nil
	case idle != "":
		if l := s.Status.Lifecycle; l != nil && l.CullAction == lullv1.IdleDelete {
			return "", fmt.Errorf("session %s/%s: too late to keep it: the replacement of its pod for idle drain %s is committed and the session is being deleted for inactivity; create it again", ns, name, idle)
		}
		return "", fmt.Errorf("session %s/%s: too late to keep its pod: the replacement for idle drain %s is committed and the session is being suspended; run lull resume again once it shows Suspended", ns, name, idle)
	default:
		return fmt.Sprintf("session %s/%s: not suspended and not being culled; nothing to resume", ns, name), nil
	}
}

// idleDrain returns the ID of the session's outstanding Idle drain request,
// if any, and whether the controller has committed to replacing its pod
// for it (status.replacement names the request).
func idleDrain(s *lullv1.Session) (id string, committed bool) {
	d := s.Status.Drain
	if d == nil || d.Reason != lullv1.DrainReasonIdle {
		return "", false
	}
	r := s.Status.Replacement
	return d.RequestID, r != nil && r.RequestID == d.RequestID
}

// getSession reads the session ns/name; its error names the session, and
// says so when there is none.
func getSession(ctx context.Context, c client.Client, ns, name string) (*lullv1.Session, error) {
	s := &lullv1.Session{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		return nil, sessionError(ns, name, err)
	}
	return s, nil
}

// patchSession sends patch to s as one JSON merge patch, as the CLI's
// field manager.
func patchSession(ctx context.Context, c client.Client, s *lullv1.Session, patch map[string]any) error {
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, s, client.RawPatch(types.MergePatchType, body), client.FieldOwner(cliFieldManager())); err != nil {
		return sessionError(s.Namespace, s.Name, err)
	}
	return nil
}

func sessionError(ns, name string, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("session %s/%s not found: check the name, and the namespace (-n); kubectl get sessions -n %s lists them", ns, name, ns)
	}
	return fmt.Errorf("session %s/%s: %w", ns, name, err)
}

// onSession returns a command body that runs do on the session named by
// the command's one argument and prints what it says.
func onSession(k *kubeFlags, do func(ctx context.Context, c client.Client, ns, name string) (string, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, ns, err := k.client()
		if err != nil {
			return err
		}
		msg, err := do(cmd.Context(), c, ns, args[0])
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), msg)
		return nil
	}
}
