package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"lull.dev/lull/internal/render"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func init() { subcommands = append(subcommands, newRolloutCommand) }

func newRolloutCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Watch and steer a template's rollout: status, force (break-glass), resume",
	}
	cmd.AddCommand(newRolloutStatusCommand(), newRolloutForceCommand(), newRolloutResumeCommand())
	return cmd
}

func newRolloutStatusCommand() *cobra.Command {
	var (
		k     kubeFlags
		watch bool
	)
	cmd := &cobra.Command{
		Use:   "status TEMPLATE",
		Short: "Show how far a template's rollout is, and what holds it back",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			for {
				if err := printStatus(cmd.Context(), cmd.OutOrStdout(), c, ns, args); err != nil || !watch {
					return err
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(2 * time.Second):
					fmt.Fprintln(cmd.OutOrStdout())
				}
			}
		},
	}
	k.bind(cmd)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "print again every 2 seconds until interrupted")
	return cmd
}

func newRolloutForceCommand() *cobra.Command {
	var (
		k      kubeFlags
		reason string
		grace  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "force TEMPLATE --reason TEXT [--grace 5m]",
		Short: "Break glass: move every session of a template to its current revision now",
		Long: `Set spec.breakGlass on a template for its current revision: every stale
session is asked to drain with a deadline --grace from now (its runtime can
tell its user when the session restarts) and replaced once the deadline
passes, whatever the update strategy, within the wave (maxUnavailable). It
applies only to this revision: the next routine revision follows the update
policy again. The template's status and Events record who asked, why and
when. Use it for security-critical updates.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason == "" {
				return fmt.Errorf("--reason is required: say why sessions are replaced now; it is recorded in the template's status and Events")
			}
			if grace < 0 {
				return fmt.Errorf("--grace %s must not be negative", grace)
			}
			c, ns, t, err := k.template(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			// The revision of the spec as it is now, which the status may
			// not show yet right after the fix was applied.
			rev := render.TemplateRevision(t)
			now := metav1.NewTime(time.Now().Truncate(time.Second))
			bg := lullv1.BreakGlass{Revision: rev, Reason: reason, Grace: metav1.Duration{Duration: grace},
				RequestedBy: whoAmI(cmd.Context(), c), RequestedAt: &now}
			body, err := json.Marshal(map[string]any{"spec": map[string]any{"breakGlass": bg}})
			if err != nil {
				return err
			}
			if err := c.Patch(cmd.Context(), t, client.RawPatch(types.MergePatchType, body), client.FieldOwner(cliFieldManager())); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "SessionTemplate %s/%s: break-glass for revision %s by %s: every stale session drains for at most %s, then is replaced\n",
				ns, t.Name, rev, bg.RequestedBy, grace)
			if hold := catalogHold(cmd.Context(), c, t); hold != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "warning: %s\n", hold)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "follow it with: lull rollout status %s -n %s --watch\n", t.Name, ns)
			return nil
		},
	}
	k.bind(cmd)
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; recorded in the template's status and Events)")
	cmd.Flags().DurationVar(&grace, "grace", 5*time.Minute, "how long each session may take to drain before it is replaced")
	return cmd
}

func newRolloutResumeCommand() *cobra.Command {
	var k kubeFlags
	cmd := &cobra.Command{
		Use:   "resume TEMPLATE",
		Short: "Continue a rollout the brake paused, accepting its failures",
		Long: `Annotate the template with lull.dev/resume-rollout=<revision>: the brake
does not pause this revision's rollout again. (A rollout paused by hand,
spec.updatePolicy.paused, resumes when that is set to false.)`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, t, err := k.template(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			rev := t.Status.PausedRevision
			if rev == "" {
				rev = render.TemplateRevision(t)
			}
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, lullv1.AnnotationResumeRollout, rev)
			if err := c.Patch(cmd.Context(), t, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner(cliFieldManager())); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "SessionTemplate %s/%s: the brake will not pause revision %s again\n", ns, t.Name, rev)
			if t.Spec.UpdatePolicy.Paused {
				fmt.Fprintf(cmd.OutOrStdout(), "note: spec.updatePolicy.paused is true; the rollout stays paused until it is set to false\n")
			}
			return nil
		},
	}
	k.bind(cmd)
	return cmd
}

// template reads the SessionTemplate name of the namespace the flags say.
func (k *kubeFlags) template(ctx context.Context, name string) (client.Client, string, *lullv1.SessionTemplate, error) {
	c, ns, err := k.client()
	if err != nil {
		return nil, "", nil, err
	}
	t := &lullv1.SessionTemplate{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, t); err != nil {
		return nil, "", nil, err
	}
	return c, ns, t, nil
}

// whoAmI is the user the API server authenticates this client as
// (SelfSubjectReview), or the local user when it cannot say.
func whoAmI(ctx context.Context, c client.Client) string {
	r := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, r); err == nil && r.Status.UserInfo.Username != "" {
		return r.Status.UserInfo.Username
	}
	return cliFieldManager()
}

// progressBar draws done of total as 30 characters.
func progressBar(done, total int32) string {
	const width = 30
	n := 0
	if total > 0 {
		n = int(done) * width / int(total)
	}
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

// printPolicy prints a template's update policy state: progress and the
// expected completion, pause, brake, break-glass and wave.
func printPolicy(out io.Writer, t *lullv1.SessionTemplate, maxUnavailable int) {
	st := t.Status
	running := st.Sessions - st.Suspended
	fmt.Fprintf(out, "  %s %d/%d on revision %s; %d draining, %d waiting for the wave, %d left alone (Passive)",
		progressBar(st.Current, running), st.Current, running, st.Revision, st.Draining, st.Waiting, st.UpdatePending)
	if e := st.ExpectedCompletion; e != nil {
		fmt.Fprintf(out, "; expected to finish in %s (%s)", time.Until(e.Time).Round(time.Second), e.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(out)
	if st.WithoutDeadline > 0 {
		fmt.Fprintf(out, "  %d stale session(s) have no idle cull or lifetime deadline ahead: they move only when replaced for another reason (see docs/lifecycle.md)\n", st.WithoutDeadline)
	}
	fmt.Fprintf(out, "  wave: %d of %d moving", len(st.Wave), maxUnavailable)
	if p := t.Spec.UpdatePolicy.DrainTimeout; p != nil {
		fmt.Fprintf(out, "; drainTimeout %s then %s", p.Duration, t.Spec.UpdatePolicy.OnDrainTimeout)
	}
	fmt.Fprintln(out)
	for _, typ := range []string{lullv1.ConditionRolloutPaused, lullv1.ConditionBreakGlass, lullv1.ConditionImageAllowed} {
		for _, c := range st.Conditions {
			// ImageAllowed only when False: the catalog holds the rollout
			// as a pause does, and the sessions whose StatefulSet already
			// carries the image only say they wait for the wave.
			shown := c.Status == metav1.ConditionTrue || typ == lullv1.ConditionBreakGlass
			if typ == lullv1.ConditionImageAllowed {
				shown = c.Status == metav1.ConditionFalse
			}
			if c.Type == typ && shown {
				fmt.Fprintf(out, "  %s=%s (%s): %s\n", c.Type, c.Status, c.Reason, c.Message)
			}
		}
	}
}
