package cli

import (
	"context"
	"fmt"
	"io"
	"os/user"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/manager"
	"lull.dev/lull/internal/rollout"
)

func init() { subcommands = append(subcommands, newStatusCommand, newForceCommand) }

// kubeFlags are the flags every client command shares.
type kubeFlags struct {
	kubeconfig, namespace string
}

func (k *kubeFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&k.kubeconfig, "kubeconfig", "", "path to a kubeconfig; default: $KUBECONFIG, then ~/.kube/config")
	cmd.Flags().StringVarP(&k.namespace, "namespace", "n", "", "namespace; default: the kubeconfig context's")
}

func (k *kubeFlags) client() (client.Client, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	ns := k.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", err
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	return c, ns, err
}

func newStatusCommand() *cobra.Command {
	var k kubeFlags
	cmd := &cobra.Command{
		Use:   "status [TEMPLATE]",
		Short: "Show a template's rollout: who runs which revision, who is draining",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			return printStatus(cmd.Context(), cmd.OutOrStdout(), c, ns, args)
		},
	}
	k.bind(cmd)
	return cmd
}

func printStatus(ctx context.Context, out io.Writer, c client.Client, ns string, args []string) error {
	var templates lullv1.SessionTemplateList
	if err := c.List(ctx, &templates, client.InNamespace(ns)); err != nil {
		return err
	}
	var sessions lullv1.SessionList
	if err := c.List(ctx, &sessions, client.InNamespace(ns)); err != nil {
		return err
	}
	found := false
	for _, t := range templates.Items {
		if len(args) == 1 && t.Name != args[0] {
			continue
		}
		found = true
		st := t.Status
		image := "(no runtime container)"
		if rt := t.RuntimeContainer(); rt != nil {
			image = rt.Image
		}
		fmt.Fprintf(out, "SessionTemplate %s/%s  image %s  strategy %s  revision %s\n", t.Namespace, t.Name, image, t.Spec.UpdatePolicy.Strategy, st.Revision)
		fmt.Fprintf(out, "  sessions %d: %d current, %d stale, %d draining, %d suspended", st.Sessions, st.Current, st.Stale, st.Draining, st.Suspended)
		if st.OldestStaleSince != nil {
			fmt.Fprintf(out, "; oldest stale for %s", time.Since(st.OldestStaleSince.Time).Round(time.Second))
		}
		fmt.Fprintln(out)
		if c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionRolledOut); c != nil {
			fmt.Fprintf(out, "  RolledOut=%s (%s): %s\n", c.Status, c.Reason, c.Message)
		}
		printPolicy(out, &t, rollout.MaxUnavailable(rollout.EffectivePolicy(&t, st.Revision), int(st.Sessions-st.Suspended)))
		tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SESSION\tPHASE\tREVISION\tUP-TO-DATE\tREASON\tRUNTIME\tTURNS\tDRAIN REQUEST")
		list := sessionsOf(sessions.Items, t.Name)
		var blocked, lost []string
		for _, s := range list {
			upToDate, reason := "-", "-"
			if c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionUpToDate); c != nil {
				upToDate, reason = string(c.Status), c.Reason
				if rollout.Blocked(c.Reason) {
					reason = "BLOCKED: " + c.Reason
					blocked = append(blocked, fmt.Sprintf("  %s: %s\n", s.Name, c.Message))
				}
			}
			if c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionReady); c != nil && c.Reason == lullv1.ReasonNodeLost {
				// The node and its state are in the condition's words;
				// the manual step too (lull never force-deletes the pod).
				reason = "NODE LOST, " + reason
				lost = append(lost, fmt.Sprintf("  %s: %s\n", s.Name, c.Message))
			}
			runtimeState, turns := "-", "-"
			if r := s.Status.Runtime; r != nil && r.PodUID == s.Status.PodUID {
				runtimeState, turns = string(r.State), fmt.Sprint(r.ActiveTurns)
			}
			drain := "-"
			if d := s.Status.Drain; d != nil {
				drain = fmt.Sprintf("%s (%s ago)", d.RequestID, time.Since(d.RequestedAt.Time).Round(time.Second))
				if d.Deadline != nil {
					drain += fmt.Sprintf(", deadline in %s", time.Until(d.Deadline.Time).Round(time.Second))
				}
				if d.Node != "" {
					drain += fmt.Sprintf(", node %s being drained", d.Node)
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Status.Phase, s.Status.TemplateRevision, upToDate, reason, runtimeState, turns, drain)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(lost) > 0 {
			fmt.Fprintf(out, "  sessions on a lost node (lull never force-deletes their pods; see the manual step):\n")
			for _, l := range lost {
				fmt.Fprint(out, l)
			}
		}
		if len(blocked) > 0 {
			fmt.Fprintf(out, "  blocked sessions (lull will not act on these until someone does):\n")
			for _, b := range blocked {
				fmt.Fprint(out, b)
			}
		}
	}
	if !found {
		if len(args) == 1 {
			return fmt.Errorf("no SessionTemplate %q in namespace %s", args[0], ns)
		}
		fmt.Fprintf(out, "no SessionTemplates in namespace %s\n", ns)
	}
	return nil
}

func sessionsOf(all []lullv1.Session, template string) []lullv1.Session {
	var out []lullv1.Session
	for _, s := range all {
		if s.Spec.TemplateRef.Name == template {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func newForceCommand() *cobra.Command {
	var (
		k       kubeFlags
		reason  string
		request string
	)
	cmd := &cobra.Command{
		Use:   "force SESSION --reason TEXT",
		Short: "Replace a session's stale pod without waiting for its drain (break glass)",
		Long: `Set lull.dev/force-update on a session: its stale pod is replaced at once,
without waiting for the runtime to drain. With --request, only the drain
request with that ID is forced; without it, the session is forced from now
on (for runtimes that cannot drain). The Event records who and why.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason == "" {
				return fmt.Errorf("--reason is required: say why the drain is skipped, it is recorded in the session's Events")
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			value := "true"
			if request != "" {
				value = request
			}
			s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: args[0]}}
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`, lullv1.AnnotationForceUpdate, value, lullv1.AnnotationForceUpdateReason, reason)
			if err := c.Patch(cmd.Context(), s, client.RawPatch("application/merge-patch+json", []byte(patch)), client.FieldOwner(cliFieldManager())); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "session %s/%s: %s=%s\n", ns, args[0], lullv1.AnnotationForceUpdate, value)
			if request == "" {
				fmt.Fprintf(cmd.OutOrStdout(), "this stays in effect: every later rollout replaces this session's pod without a drain.\n"+
					"undo with: kubectl annotate session -n %s %s %s-\n", ns, args[0], lullv1.AnnotationForceUpdate)
			}
			return nil
		},
	}
	k.bind(cmd)
	cmd.Flags().StringVar(&reason, "reason", "", "why the drain is skipped (required; recorded in the Event)")
	cmd.Flags().StringVar(&request, "request", "", "force only the drain request with this ID (status.drain.requestID)")
	return cmd
}

// cliFieldManager names the CLI and the local user in the session's
// managed fields, which the Forced Event quotes as who set the annotation.
func cliFieldManager() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "lull-cli:" + u.Username
	}
	return "lull-cli"
}
