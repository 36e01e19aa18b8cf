// Package manager assembles lull's controller manager: the scheme, a cache
// that holds only lull's own objects, the Session and SessionTemplate
// controllers, the files sweeper, health probes, metrics and leader
// election.
package manager

import (
	"cmp"
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/controller/filesweep"
	"lull.dev/lull/internal/controller/session"
	"lull.dev/lull/internal/controller/template"
	"lull.dev/lull/internal/index"
	"lull.dev/lull/internal/requestmetrics"
)

// Options configure the manager. The zero value is not useful: set at least
// the addresses (":0" to disable is not supported; use "0").
type Options struct {
	// MetricsAddr serves Prometheus metrics; "0" disables.
	MetricsAddr string
	// HealthAddr serves /healthz and /readyz; "0" disables.
	HealthAddr string
	// PprofAddr serves net/http/pprof under /debug/pprof/; "" or "0"
	// disables (the default: profiles expose memory contents).
	PprofAddr string
	// LeaderElection enables leader election, so only one replica acts.
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease; empty means the in-cluster
	// namespace.
	LeaderElectionNamespace string
	// Namespace, when set, restricts the controller to one namespace.
	Namespace string
	// MaxConcurrentReconciles of the Session controller; zero means 8.
	MaxConcurrentReconciles int
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election as
	// client-go's leaderelection.LeaderElectionConfig does; zero means 15 s,
	// 10 s and 2 s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// FilesSweepInterval is the longest time between two passes of the
	// files sweeper over a namespace; FilesSweepGrace how long a files
	// ConfigMap must have been unchanged before the sweeper may delete
	// it. Zero means a minute each (filesweep.DefaultInterval,
	// filesweep.DefaultGrace).
	FilesSweepInterval, FilesSweepGrace time.Duration
}

// Scheme returns a scheme with the core, apps and RBAC types and lull's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := lullv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

func init() {
	metrics.Registry.MustRegister(requestmetrics.Requests)
}

// New builds the manager with lull's controllers registered. Objects lull
// renders are cached only when they carry the lull.dev/session label (files
// ConfigMaps: lull.dev/files), so the controller's memory grows with
// sessions, not with the cluster. PodDisruptionBudgets are all cached, not
// only the sessions' own: another budget that also selects a session pod
// makes every eviction of it fail (BudgetsOverlap); Nodes are all cached,
// their spec only (stripSpec); PersistentVolumes are all cached (few, one
// per claim), read only for a pod whose node is being drained
// (rollout.PinnedTo).
func New(cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	cfg = rest.CopyConfig(cfg)
	requestmetrics.Instrument(cfg)

	owned, err := labels.NewRequirement(lullv1.LabelSession, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	byLabel := cache.ByObject{Label: labels.NewSelector().Add(*owned)}
	files, err := labels.NewRequirement(lullv1.LabelFiles, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	cacheOpts := cache.Options{
		// Managed fields and last-applied annotations stripped from every
		// cached object, except what the Session controller reads of a
		// Session's managed fields (session.StripSessionForCache).
		DefaultTransform: stripForCache,
		ByObject: map[client.Object]cache.ByObject{
			&lullv1.Session{}:        {Transform: session.StripSessionForCache},
			&corev1.Pod{}:            byLabel,
			&appsv1.StatefulSet{}:    byLabel,
			&corev1.Service{}:        byLabel,
			&corev1.ServiceAccount{}: byLabel,
			&rbacv1.Role{}:           byLabel,
			&rbacv1.RoleBinding{}:    byLabel,
			// Session claims carry the StatefulSet's selector labels.
			&corev1.PersistentVolumeClaim{}: byLabel,
			// The content-addressed ConfigMaps of templates' files
			// (shared by a template's sessions, so not labelled by one).
			&corev1.ConfigMap{}: {Label: labels.NewSelector().Add(*files)},
			// Only the StatefulSet controller's refusals of a pod or claim.
			&corev1.Event{}: {Field: session.FailedCreateEvents},
		},
	}
	if opts.Namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{opts.Namespace: {}}
	}
	leaseDuration, renewDeadline, retryPeriod := cmp.Or(opts.LeaseDuration, 15*time.Second), cmp.Or(opts.RenewDeadline, 10*time.Second), cmp.Or(opts.RetryPeriod, 2*time.Second)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  Scheme(),
		Cache:                   cacheOpts,
		Metrics:                 metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress:  opts.HealthAddr,
		PprofBindAddress:        opts.PprofAddr,
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        "lull-controller.lull.dev",
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		LeaseDuration:           &leaseDuration,
		RenewDeadline:           &renewDeadline,
		RetryPeriod:             &retryPeriod,
		Logger:                  ctrl.Log.WithName("manager"),
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := index.AddDefaultIndexes(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("register the cache's indexes: %w", err)
	}
	sessions := &session.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("lull-controller")}
	if err := sessions.SetupWithManager(mgr, session.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}); err != nil {
		return nil, fmt.Errorf("set up session controller: %w", err)
	}
	if err := (&template.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("lull-controller"),
		ForgetTemplateMetrics: session.ForgetTemplateMetrics}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up sessiontemplate controller: %w", err)
	}
	sweeper := &filesweep.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("lull-controller"),
		Interval: opts.FilesSweepInterval, Grace: opts.FilesSweepGrace}
	if err := sweeper.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up files sweeper: %w", err)
	}
	return mgr, nil
}
