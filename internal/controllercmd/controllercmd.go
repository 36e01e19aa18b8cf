// Package controllercmd holds the command that runs lull's controller
// manager: the production binary lull-controller is this command alone,
// and `lull controller` is the same command inside the dev binary. It
// imports only the controller's packages, never the local control plane,
// the bench or the CLI (TestProductionBinariesLinkOnlyTheirOwn in
// internal/dev).
package controllercmd

import (
	"flag"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"lull.dev/lull/internal/controller/filesweep"
	"lull.dev/lull/internal/manager"
	"lull.dev/lull/internal/version"
)

// New returns the command that runs the controller manager, named use
// ("controller" inside the dev binary, "lull-controller" as its own
// binary).
func New(use string) *cobra.Command {
	var (
		opts       manager.Options
		kubeconfig string
		qps        float32
		burst      int
		zapOpts    zap.Options
	)
	cmd := &cobra.Command{
		Use:          use,
		Short:        "Run the lull controller manager (Session and SessionTemplate controllers, files sweeper)",
		Version:      version.String(),
		SilenceUsage: true,
		// Flags only: a bool flag written with a space (`--leader-elect
		// false`) would otherwise leave "false" as an argument cobra
		// ignores, and run with the flag's default.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return err
			}
			cfg.QPS, cfg.Burst = qps, burst
			mgr, err := manager.New(cfg, opts)
			if err != nil {
				return err
			}
			return mgr.Start(ctrl.SetupSignalHandler())
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "path to a kubeconfig; default: $KUBECONFIG, then in-cluster")
	f.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint; 0 disables")
	f.StringVar(&opts.HealthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz; 0 disables")
	f.StringVar(&opts.PprofAddr, "pprof-bind-address", "", "address of net/http/pprof's /debug/pprof/ (for profiling); empty disables")
	f.BoolVar(&opts.LeaderElection, "leader-elect", true, "elect a leader so only one replica acts")
	f.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader Lease; default: the pod's namespace")
	f.DurationVar(&opts.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a leader's lease lasts without renewal; a standby takes over after it")
	f.DurationVar(&opts.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it stops acting")
	f.DurationVar(&opts.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often replicas try to acquire or renew the lease")
	f.StringVar(&opts.Namespace, "namespace", "", "watch only this namespace; default: all")
	f.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", 16, "sessions reconciled at once (sized for fleets: docs/benchmarks.md)")
	f.DurationVar(&opts.FilesSweepInterval, "files-sweep-interval", filesweep.DefaultInterval, "longest time between two passes of the files sweeper over a namespace (it also runs on every change it watches)")
	f.DurationVar(&opts.FilesSweepGrace, "files-sweep-grace", filesweep.DefaultGrace, "how long a files ConfigMap must have been unchanged, as this controller observed it, before the sweeper may delete it; nothing is swept until this long after a start")
	f.Float32Var(&qps, "kube-api-qps", 200, "client-side limit of API requests per second (the API server's priority and fairness still applies; sized for fleets: docs/benchmarks.md)")
	f.IntVar(&burst, "kube-api-burst", 400, "client-side burst of API requests")
	zfs := flag.NewFlagSet("zap", flag.ContinueOnError)
	zapOpts.BindFlags(zfs)
	f.AddGoFlagSet(zfs)
	return cmd
}

// restConfig loads a client config from an explicit kubeconfig path, or the
// standard chain: $KUBECONFIG, ~/.kube/config, in-cluster.
func restConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
}
