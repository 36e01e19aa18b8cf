package runtimesdk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func TestConfigReportRefresh(t *testing.T) {
	valid := Config{SessionName: "s1", SessionNamespace: "ns", PodUID: testPod, REST: &rest.Config{}}
	for _, tc := range []struct {
		refresh     time.Duration
		wantErr     bool
		wantRefresh time.Duration
		wantSeconds int32
	}{
		{0, false, time.Minute, 60}, // the default
		{time.Second, false, time.Second, 1},
		{1500 * time.Millisecond, false, 1500 * time.Millisecond, 2}, // never says less often than it writes
		{90 * time.Second, false, 90 * time.Second, 90},
		{time.Hour, false, time.Hour, 3600},
		{999 * time.Millisecond, true, 0, 0},
		{time.Hour + time.Millisecond, true, 0, 0},
		{-time.Second, true, 0, 0},
	} {
		cfg := valid
		cfg.ReportRefresh = tc.refresh
		err := cfg.validate()
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), "ReportRefresh") {
				t.Errorf("ReportRefresh %s: validate = %v, want an error naming ReportRefresh", tc.refresh, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ReportRefresh %s: validate = %v", tc.refresh, err)
		}
		if d, s := cfg.reportRefresh(); d != tc.wantRefresh || s != tc.wantSeconds {
			t.Errorf("ReportRefresh %s: refresh %s, RefreshSeconds %d; want %s, %d", tc.refresh, d, s, tc.wantRefresh, tc.wantSeconds)
		}
	}
}

func TestConfigFromEnvReportRefresh(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	t.Setenv(lullv1.EnvSessionName, "s1")
	t.Setenv(lullv1.EnvSessionNamespace, "ns")
	t.Setenv(lullv1.EnvPodName, "s1-0")
	t.Setenv(lullv1.EnvPodUID, string(testPod))
	for _, tc := range []struct {
		env     string // "" counts as unset
		want    time.Duration
		wantErr string
	}{
		{"", 0, ""},
		{"30s", 30 * time.Second, ""},
		{"2m", 2 * time.Minute, ""},
		{"soon", 0, `LULL_REPORT_REFRESH="soon": want a duration`},
		{"30", 0, `LULL_REPORT_REFRESH="30": want a duration`},
		{"2h", 0, `LULL_REPORT_REFRESH="2h": 2h0m0s is not between 1s and 1h0m0s`},
		{"0s", 0, `LULL_REPORT_REFRESH="0s": 0s is not between 1s and 1h0m0s`},
	} {
		t.Setenv(EnvReportRefresh, tc.env)
		cfg, err := ConfigFromEnv()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s=%q: error %v, want %q", EnvReportRefresh, tc.env, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s=%q: %v", EnvReportRefresh, tc.env, err)
			continue
		}
		if cfg.ReportRefresh != tc.want || cfg.SessionName != "s1" || cfg.PodUID != testPod {
			t.Errorf("%s=%q: config %+v, want ReportRefresh %s", EnvReportRefresh, tc.env, cfg, tc.want)
		}
	}
}
