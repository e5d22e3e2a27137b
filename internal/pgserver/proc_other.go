//go:build unix && !linux

package pgserver

import (
	"os/exec"
	"syscall"
)

// startProcess starts cmd in its own process group, as cred if that is not
// nil.
func startProcess(cmd *exec.Cmd, cred *syscall.Credential) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	return cmd.Start()
}
