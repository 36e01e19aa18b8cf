//go:build unix

package devcluster

import (
	"errors"
	"syscall"
)

// signalGroup sends sig to the process group pgid; a group that no longer
// exists is not an error.
func signalGroup(pgid int, sig syscall.Signal) error {
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}
