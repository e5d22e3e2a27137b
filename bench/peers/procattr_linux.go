package main

import "syscall"

// On Linux the kernel kills redis-server when this process dies without
// stopping it (a crash, SIGKILL, SIGPIPE from `| head`).
func init() { redisProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
