package devcluster

import "syscall"

// sysProcAttr puts the child in its own process group and has the kernel
// SIGKILL it when the thread that started it (see spawn) dies, so a crashed
// `lull dev` leaves nothing behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
