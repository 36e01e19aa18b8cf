package runtimesdk

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Config says which session a runtime serves and how it reaches the API
// server.
type Config struct {
	// SessionName and SessionNamespace name the Session whose runtime this
	// is (LULL_SESSION_NAME, LULL_SESSION_NAMESPACE).
	SessionName      string
	SessionNamespace string
	// PodName is the name of the pod the runtime runs in (LULL_POD_NAME);
	// it appears in logs.
	PodName string
	// PodUID is the UID of that pod (LULL_POD_UID, from the downward API's
	// metadata.uid). The runtime acts only on drain requests for it and
	// reports under it.
	PodUID types.UID
	// REST reaches the API server as the session's runtime identity, which
	// may get and watch the Session and patch its status.
	REST *rest.Config
	// Logger receives the runtime's logs; nil means slog.Default().
	Logger *slog.Logger
	// ReportRefresh is the longest a change of turn count or activity
	// stays unwritten in status.runtime (LULL_REPORT_REFRESH): such
	// changes are coalesced and written at most once per ReportRefresh,
	// and nothing is written while nothing changes. It is the granularity
	// of activity the idle policy sees: the controller culls no sooner
	// than ReportRefresh after the idle limit. A change of drain state is
	// written at once whatever it is. Every report carries it, rounded up
	// to whole seconds, as RefreshSeconds. Zero means
	// DefaultReportRefresh; otherwise it must lie between MinReportRefresh
	// and MaxReportRefresh.
	ReportRefresh time.Duration
	// Clock is the time the runtime reads: when a coalesced report is
	// due, the backoff of failed writes, reads and watches, how long a
	// watch lived, turn leases and their grace, and the times of activity
	// and of each report. Nil means the real clock. A test hands in a
	// fake one (k8s.io/utils/clock/testing.FakeClock) and moves it with
	// Step; the runtime starts the callbacks of the clock's AfterFunc in
	// a goroutine of their own, so a clock may call them from where its
	// time moves.
	Clock clock.WithDelayedExecution
	// OmitStart leaves status.runtime.startedAt out of every report. By
	// default each report says when this process started (when New made
	// the Runtime, by Clock, to the second): on the node's clock, which
	// the kubelet's record of the runtime container's last termination is
	// on too, so the controller can tell a restarted runtime's report
	// from the crashed run's whatever the node's skew. Set it when the
	// process reporting is not the runtime container's own (the drain
	// sidecar, lull agent, reports for a runtime in another container,
	// whose start it does not know): the controller then orders the
	// report by its write time.
	OmitStart bool
}

// The bounds and default of Config.ReportRefresh. The maximum is the
// largest RefreshSeconds the API accepts.
const (
	DefaultReportRefresh = time.Minute
	MinReportRefresh     = time.Second
	MaxReportRefresh     = time.Hour
)

// EnvReportRefresh is the environment variable ConfigFromEnv reads
// Config.ReportRefresh from: a Go duration ("30s", "2m").
const EnvReportRefresh = "LULL_REPORT_REFRESH"

// reportRefresh returns the longest the reporter leaves a change of
// activity unwritten, and that bound rounded up to whole seconds, the
// RefreshSeconds every report carries: the runtime is never later than it
// says.
func (c Config) reportRefresh() (time.Duration, int32) {
	d := c.ReportRefresh
	if d == 0 {
		d = DefaultReportRefresh
	}
	return d, int32((d + time.Second - 1) / time.Second)
}

// clock returns the clock the runtime reads: Clock, or the real clock if
// Clock is nil.
func (c Config) clock() clock.WithDelayedExecution {
	if c.Clock == nil {
		return clock.RealClock{}
	}
	return c.Clock
}

// CheckReportRefresh returns an error if d is outside
// [MinReportRefresh, MaxReportRefresh], the bounds Config.ReportRefresh
// (when not zero) and LULL_REPORT_REFRESH must keep. A runtime that takes
// the refresh as a flag checks it with this before it starts.
func CheckReportRefresh(d time.Duration) error {
	if d < MinReportRefresh || d > MaxReportRefresh {
		return fmt.Errorf("%s is not between %s and %s", d, MinReportRefresh, MaxReportRefresh)
	}
	return nil
}

// ConfigFromEnv returns the Config lull gives a runtime container through
// its environment: LULL_SESSION_NAME, LULL_SESSION_NAMESPACE, LULL_POD_NAME
// and LULL_POD_UID, LULL_REPORT_REFRESH if it is set, and the REST config
// from the kubeconfig files in KUBECONFIG when that is set, else from the
// pod's service account (in-cluster). The error names every variable that
// is missing, and LULL_REPORT_REFRESH if it is not a duration within
// bounds. It is ConfigFrom(os.Getenv).
func ConfigFromEnv() (Config, error) { return ConfigFrom(os.Getenv) }

// ConfigFrom is ConfigFromEnv with the environment read through getenv
// (which returns "" for an unset variable), so that many runtimes in one
// process each read their own: with getenv of a map, nothing is read from
// this process's environment unless KUBECONFIG is unset, when the
// in-cluster config (which reads the process's KUBERNETES_SERVICE_HOST and
// the pod's token file) is used.
func ConfigFrom(getenv func(string) string) (Config, error) {
	var missing []string
	env := func(name string) string {
		v := getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	cfg := Config{
		SessionName:      env(lullv1.EnvSessionName),
		SessionNamespace: env(lullv1.EnvSessionNamespace),
		PodName:          env(lullv1.EnvPodName),
		PodUID:           types.UID(env(lullv1.EnvPodUID)),
	}
	if len(missing) > 0 {
		return Config{}, fmt.Errorf("%s not set: lull sets these in a session pod's runtime container; outside a pod, set them by hand", strings.Join(missing, ", "))
	}
	if v := getenv(EnvReportRefresh); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return Config{}, fmt.Errorf("%s=%q: want a duration such as 30s or 2m", EnvReportRefresh, v)
		}
		if err := CheckReportRefresh(d); err != nil {
			return Config{}, fmt.Errorf("%s=%q: %w", EnvReportRefresh, v, err)
		}
		cfg.ReportRefresh = d
	}
	rc, err := restConfig(getenv("KUBECONFIG"))
	if err != nil {
		return Config{}, err
	}
	cfg.REST = rc
	return cfg, nil
}

// restConfig loads the kubeconfig files in kubeconfig (a KUBECONFIG list)
// if it is set, else the in-cluster config. It never falls back to
// ~/.kube/config: a runtime must not run as its user.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(kubeconfig)}
		rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("KUBECONFIG=%s: %w", kubeconfig, err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("KUBECONFIG is not set and the in-cluster config is unavailable: %w", err)
	}
	return rc, nil
}

// validate returns an error naming every required field that is empty, and
// ReportRefresh if it is out of bounds.
func (c Config) validate() error {
	var errs []error
	if c.SessionName == "" {
		errs = append(errs, errors.New("SessionName is empty"))
	}
	if c.SessionNamespace == "" {
		errs = append(errs, errors.New("SessionNamespace is empty"))
	}
	if c.PodUID == "" {
		errs = append(errs, errors.New("PodUID is empty"))
	}
	if c.REST == nil {
		errs = append(errs, errors.New("REST is nil"))
	}
	if c.ReportRefresh != 0 {
		if err := CheckReportRefresh(c.ReportRefresh); err != nil {
			errs = append(errs, fmt.Errorf("ReportRefresh %w (zero means %s)", err, DefaultReportRefresh))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runtime config: %w", err)
	}
	return nil
}
