package main

import "syscall"

// childProcAttr makes the kernel kill a child (redis-server, a worker) when
// this process dies without stopping it (a crash, SIGKILL, SIGPIPE from
// `| head`).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
