// Package runtimesdk is lull's SDK for session runtimes written in Go. A
// runtime holds interactive work in "turns"; lull replaces the runtime's
// pod only between turns.
//
// A Runtime admits turns through its Gate, watches its own Session for a
// drain request naming its pod, and reports its drain state in the
// Session's status.runtime. Once drained it is sealed: it accepts no turn
// until the request is withdrawn and it has published Serving again, which
// is what makes it safe for the controller to delete the pod on a Drained
// report. This follows the Kelos session-runtime drain.
//
// The report is written only when what it says changes: a new drain state
// at once, turn counts and activity coalesced so that none stays unwritten
// longer than Config.ReportRefresh. An idle runtime makes no API request
// after its first report, save one watch request every 30 to 60 minutes
// (the watch resumes from its last version, with bookmarks, and never
// reads again unless that version has expired). A turn attempted while the
// session is being drained for inactivity (reason Idle) is refused but
// counts as activity, and is reported at once: the controller then
// withdraws the request and the runtime serves again.
//
//	rt, err := runtimesdk.New(cfg) // cfg from runtimesdk.ConfigFromEnv()
//	go rt.Run(ctx)
//	...
//	turn, err := rt.BeginTurn(runtimesdk.TurnOptions{})
//	if errors.Is(err, runtimesdk.ErrDraining) {
//		// tell the client to reconnect and retry
//	}
//	if err != nil {
//		return err
//	}
//	defer turn.End()
//
// A process that holds turns for others and may restart while they go on
// (`lull agent`) persists each turn's Turn.Record and, when it starts
// again, hands the records to Restore before Run, so its first report
// already counts them.
//
// The runtime's identity may only get and watch its Session and patch its
// sessions/status, and the runtime needs nothing more: it never lists.
package runtimesdk
