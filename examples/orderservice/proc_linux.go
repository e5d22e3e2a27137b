package main

import (
	"os/exec"
	"runtime"
	"syscall"
)

// startChild starts cmd in its own process group (so that a Ctrl-C in the
// terminal reaches the load test, which stops the instances in order), with
// Pdeathsig so that it is killed if the load test dies without cleaning up.
// The kernel sends Pdeathsig when the *thread* that forked the child exits,
// so the fork happens on a goroutine locked to its thread, which stays
// locked until the child has exited. wait returns cmd.Wait's error.
func startChild(cmd *exec.Cmd) (done <-chan struct{}, wait func() error, err error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	exited := make(chan struct{})
	var waitErr error
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		waitErr = cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return nil, nil, err
	}
	return exited, func() error { <-exited; return waitErr }, nil
}
