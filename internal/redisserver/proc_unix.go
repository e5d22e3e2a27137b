//go:build unix && !linux

package redisserver

import (
	"os/exec"
	"syscall"
)

// startProcess starts cmd in its own process group.
func startProcess(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd.Start()
}
