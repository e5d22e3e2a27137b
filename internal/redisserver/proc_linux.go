package redisserver

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// On Linux the child also gets Pdeathsig=SIGKILL, so a redis-server cannot
// outlive a test binary that dies without running its cleanups (for example
// on a -timeout panic or Ctrl-C). Pdeathsig fires when the *thread* that
// forked the child exits, not the process, so all children are forked from
// one goroutine that is locked to its OS thread and never returns: that
// thread lives exactly as long as the process.

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

// startProcess starts cmd in its own process group, tied to our lifetime.
func startProcess(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnRequest)
		go spawner()
	})
	req := spawnRequest{cmd: cmd, err: make(chan error, 1)}
	spawnCh <- req
	return <-req.err
}
