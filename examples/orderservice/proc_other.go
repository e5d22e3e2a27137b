//go:build !linux

package main

import (
	"os/exec"
)

// startChild starts cmd; wait returns cmd.Wait's error. (On Linux, the
// child is also killed if the load test dies.)
func startChild(cmd *exec.Cmd) (done <-chan struct{}, wait func() error, err error) {
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	return exited, func() error { <-exited; return waitErr }, nil
}
