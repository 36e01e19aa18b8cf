//go:build unix && !linux

package devcluster

import "syscall"

// sysProcAttr puts the child in its own process group. Only Linux can also
// kill children when this process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
