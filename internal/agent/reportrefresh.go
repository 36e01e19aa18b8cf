package agent

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"lull.dev/lull/runtimesdk"
)

// addReportRefreshFlag adds --report-refresh, the longest a change of the
// runtime's activity stays unwritten (runtimesdk.Config.ReportRefresh),
// to fs. Its default is $LULL_REPORT_REFRESH when that is a duration within
// bounds, else runtimesdk.DefaultReportRefresh; a bad LULL_REPORT_REFRESH is
// left for runtimesdk.ConfigFromEnv to name.
func addReportRefreshFlag(fs *pflag.FlagSet, p *time.Duration, usage string) {
	def := runtimesdk.DefaultReportRefresh
	if d, err := time.ParseDuration(os.Getenv(runtimesdk.EnvReportRefresh)); err == nil && checkReportRefresh(d) == nil {
		def = d
	}
	fs.DurationVar(p, "report-refresh", def, usage+"; default from "+runtimesdk.EnvReportRefresh)
}

// checkReportRefresh returns an error naming --report-refresh if d is out
// of bounds.
func checkReportRefresh(d time.Duration) error {
	if err := runtimesdk.CheckReportRefresh(d); err != nil {
		return fmt.Errorf("--report-refresh: %w", err)
	}
	return nil
}
