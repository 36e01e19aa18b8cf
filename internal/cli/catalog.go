package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog"
)

func init() { subcommands = append(subcommands, newCatalogCommand) }

func newCatalogCommand() *cobra.Command {
	var (
		k         kubeFlags
		templates bool
	)
	cmd := &cobra.Command{
		Use:   "catalog",
		Short: "List the runtime images templates may run (RuntimeCatalog default)",
		Long: `List RuntimeCatalog "default": the repositories, tags, digests and
namespaces a SessionTemplate's runtime image must come from. The API server
refuses any other (see docs/catalog.md); without a catalog every image is
allowed. With --templates, also judge the runtime image of every template of
the namespace.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			if err := WriteCatalog(cmd.Context(), cmd.OutOrStdout(), c); err != nil {
				return err
			}
			if templates {
				return writeTemplates(cmd.Context(), cmd.OutOrStdout(), c, ns)
			}
			return nil
		},
	}
	k.bind(cmd)
	cmd.Flags().BoolVar(&templates, "templates", false, "also show each template of the namespace with its runtime image and whether the catalog allows it")
	cmd.AddCommand(newCatalogCheckCommand())
	return cmd
}

func newCatalogCheckCommand() *cobra.Command {
	var k kubeFlags
	cmd := &cobra.Command{
		Use:   "check IMAGE",
		Short: "Say whether a template in the namespace may run IMAGE, and why",
		Long: `Judge IMAGE as the API server's admission policy judges a template's
runtime image in the namespace (-n): allowed or refused, with the reason.
It exits 1 when the image is refused and 2 when it could not judge (no
cluster, no permission to read the catalog), so a script can tell them
apart.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.client()
			if err != nil {
				return ExitError{Code: 2, Err: err}
			}
			ok, err := CheckImage(cmd.Context(), cmd.OutOrStdout(), c, ns, args[0])
			if err != nil {
				return ExitError{Code: 2, Err: err}
			}
			if !ok {
				cmd.SilenceErrors = true
				return errRefused
			}
			return nil
		},
	}
	k.bind(cmd)
	return cmd
}

// errRefused makes `lull catalog check` exit 1; the reason was printed
// already.
var errRefused = errors.New("image refused")

// ExitError is an error with the exit status a command wants (main uses
// it; any other error exits 1).
type ExitError struct {
	Code int
	Err  error
}

func (e ExitError) Error() string { return e.Err.Error() }
func (e ExitError) Unwrap() error { return e.Err }

// ExitCode is the exit status for err returned by a command: 0 for nil,
// an ExitError's Code, else 1.
func ExitCode(err error) int {
	var e ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.Code
	}
	return 1
}

// readCatalog returns RuntimeCatalog "default", or nil when there is none
// (or its API is not installed): then every image is allowed.
func readCatalog(ctx context.Context, c client.Reader) (*lullv1.RuntimeCatalog, error) {
	cat, err := catalog.Read(ctx, c)
	if meta.IsNoMatchError(errors.Unwrap(err)) {
		return nil, nil
	}
	return cat, err
}

// WriteCatalog prints RuntimeCatalog "default" as a table, one line per
// entry (REPOSITORY, TAGS, DIGESTS, NAMESPACES; "*" for every namespace),
// or says that there is none and every image is allowed.
func WriteCatalog(ctx context.Context, out io.Writer, c client.Reader) error {
	cat, err := readCatalog(ctx, c)
	if err != nil {
		return err
	}
	if cat == nil {
		fmt.Fprintf(out, "no RuntimeCatalog %q: every image is allowed\n", lullv1.RuntimeCatalogName)
		return nil
	}
	if len(cat.Spec.Images) == 0 {
		fmt.Fprintf(out, "RuntimeCatalog %q lists no images: every template's runtime image is refused\n", cat.Name)
		return nil
	}
	fmt.Fprintf(out, "RuntimeCatalog %q: a template's runtime image must be one of these (an image with a digest is judged by its digest)\n", cat.Name)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPOSITORY\tTAGS\tDIGESTS\tNAMESPACES")
	for _, e := range cat.Spec.Images {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Repository, list(e.Tags, "-"), list(e.Digests, "-"), list(e.Namespaces, "*"))
	}
	return tw.Flush()
}

// CheckImage prints whether a template in namespace may run image as its
// runtime ("allowed: ..." or "refused: ..." with the reason) and returns
// the verdict. The rules are package catalog's, which the admission policy
// shares.
func CheckImage(ctx context.Context, out io.Writer, c client.Reader, namespace, image string) (bool, error) {
	cat, err := readCatalog(ctx, c)
	if err != nil {
		return false, err
	}
	ok, why := catalog.Allowed(cat, namespace, image)
	verdict := "refused"
	if ok {
		verdict = "allowed"
	}
	fmt.Fprintf(out, "%s: %s in namespace %s: %s\n", verdict, image, namespace, why)
	return ok, nil
}

// writeTemplates prints each template of namespace with its runtime image,
// the catalog's verdict and the controller's ImageAllowed condition.
func writeTemplates(ctx context.Context, out io.Writer, c client.Reader, namespace string) error {
	cat, err := readCatalog(ctx, c)
	if err != nil {
		return err
	}
	var templates lullv1.SessionTemplateList
	if err := c.List(ctx, &templates, client.InNamespace(namespace)); err != nil {
		return err
	}
	fmt.Fprintf(out, "\ntemplates in namespace %s:\n", namespace)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TEMPLATE\tIMAGE\tCATALOG\tIMAGE-ALLOWED (controller)")
	for _, t := range templates.Items {
		image, verdict := "(no runtime container)", "-"
		if rt := t.RuntimeContainer(); rt != nil {
			image = rt.Image
			verdict = "refused"
			if ok, _ := catalog.Allowed(cat, namespace, image); ok {
				verdict = "allowed"
			}
		}
		cond := "-"
		if ct := meta.FindStatusCondition(t.Status.Conditions, lullv1.ConditionImageAllowed); ct != nil {
			cond = fmt.Sprintf("%s (%s)", ct.Status, ct.Reason)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, image, verdict, cond)
	}
	return tw.Flush()
}

func list(items []string, empty string) string {
	if len(items) == 0 {
		return empty
	}
	return strings.Join(items, ",")
}

// catalogHold says why nothing will move for a break-glass on t when the
// catalog refuses t's runtime image (the rollout holds whatever the
// strategy), or "" when it allows it or cannot be read: the warning is a
// courtesy, the controller's ImageAllowed condition is the record.
func catalogHold(ctx context.Context, c client.Reader, t *lullv1.SessionTemplate) string {
	rt := t.RuntimeContainer()
	if rt == nil {
		return ""
	}
	cat, err := readCatalog(ctx, c)
	if err != nil {
		return ""
	}
	if ok, why := catalog.Allowed(cat, t.Namespace, rt.Image); !ok {
		return fmt.Sprintf("%s; no session moves until the catalog lists the image (lull catalog), break-glass or not", why)
	}
	return ""
}
