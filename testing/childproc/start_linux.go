package childproc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// On Linux every child also gets Pdeathsig=SIGKILL, so a server cannot
// outlive a test binary that dies without running its cleanups (a -timeout
// panic, Ctrl-C). The kernel sends that signal when the *thread* that forked
// the child exits, not the process, so all children are forked by one
// goroutine locked to an OS thread that it never releases: that thread lives
// as long as the process. (The kernel clears Pdeathsig when a child's
// credentials change, but Go sets it after switching to Credential, so it
// survives.)

type spawnRequest struct {
	cmd *exec.Cmd
	err chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnRequest
)

func spawner() {
	runtime.LockOSThread() // never unlocked: the thread must never exit
	for req := range spawnCh {
		req.err <- req.cmd.Start()
	}
}

// Start starts cmd in its own process group, as cred if that is not nil,
// tied to this process's lifetime.
func Start(cmd *exec.Cmd, cred *syscall.Credential) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnRequest)
		go spawner()
	})
	req := spawnRequest{cmd: cmd, err: make(chan error, 1)}
	spawnCh <- req
	return <-req.err
}
