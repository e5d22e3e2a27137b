//go:build unix && !linux

package childproc

import (
	"os/exec"
	"syscall"
)

// Start starts cmd in its own process group, as cred if that is not nil.
func Start(cmd *exec.Cmd, cred *syscall.Credential) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	return cmd.Start()
}
