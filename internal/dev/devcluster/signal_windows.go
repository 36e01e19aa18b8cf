package devcluster

import (
	"errors"
	"os"
	"syscall"
)

// sysProcAttr: Windows has no process groups to set here. The control
// plane binaries are not built for Windows; this only keeps the package
// compiling there.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalGroup kills the process (Windows cannot deliver SIGTERM).
func signalGroup(pid int, _ syscall.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}
