package redisserver

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/fencelock/fencelock/testing/childproc"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// readyTimeout bounds how long one launch waits for the server to answer PING.
	readyTimeout = 10 * time.Second
	// stopTimeout bounds how long Stop waits after SIGTERM before SIGKILL.
	stopTimeout = 10 * time.Second
	// launchAttempts is how many times a launch that fails with "address
	// already in use" is tried (with a fresh port when the port was picked).
	launchAttempts = 5
	// errorTailLines is how many log lines are quoted in errors.
	errorTailLines = 20
	// logfTailLines is how many log lines are passed to Options.Logf.
	logfTailLines = 200

	logName = "redis.log" // the server's --logfile, inside Dir
	outName = "redis.out" // the process's stdout and stderr, inside Dir
)

// errAddrInUse marks a launch that failed because the port was taken.
var errAddrInUse = errors.New("redisserver: port already in use")

// Options configures Start.
type Options struct {
	// Port is the TCP port to listen on; 0 picks a free loopback port.
	Port int
	// Args are extra redis-server arguments appended after the defaults.
	Args []string
	// Logf, if set, receives the server's log when it fails to start or
	// has to be killed after a graceful stop timed out. It is only called
	// synchronously from Start, Restart and Stop.
	Logf func(format string, args ...any)
}

// Server is a redis-server child process listening on 127.0.0.1. Its methods
// are safe for concurrent use.
type Server struct {
	bin  string
	dir  string
	args []string
	logf func(format string, args ...any)

	mu     sync.Mutex
	port   int
	proc   *process // the latest process started; nil before the first start
	paused bool
	closed bool
}

// process is one run of redis-server; a goroutine calls cmd.Wait exactly once
// and then closes done.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's result; read only after done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalGroup sends sig to the process group led by p (Setpgid makes the
// group id equal to the pid), so children redis forked are hit too.
func (p *process) signalGroup(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	err := syscall.Kill(-p.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// kill sends SIGKILL to p's process group and waits for p to be reaped.
func (p *process) kill() error {
	err := p.signalGroup(syscall.SIGKILL)
	if err != nil {
		err = fmt.Errorf("redisserver: killing redis-server: %w", err)
		p.cmd.Process.Kill() // fall back to the process itself
	}
	<-p.done
	return err
}

// Start starts redis-server on 127.0.0.1 with persistence disabled and a
// private temporary directory, and waits until it answers PING. The error
// wraps ErrNotFound if redis-server cannot be found. Call Close when done.
func Start(opts Options) (*Server, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("redisserver: invalid port %d", opts.Port)
	}
	dir, err := os.MkdirTemp("", "redisserver-")
	if err != nil {
		return nil, fmt.Errorf("redisserver: creating temp dir: %w", err)
	}
	return launch(bin, dir, opts)
}

// launch starts bin as a Server in dir (removed again if it fails).
func launch(bin, dir string, opts Options) (*Server, error) {
	s := &Server{
		bin:  bin,
		dir:  dir,
		args: append([]string(nil), opts.Args...),
		logf: opts.Logf,
		port: opts.Port,
	}
	s.mu.Lock()
	err := s.launchLocked(opts.Port != 0)
	s.mu.Unlock()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port()))
}

// Port returns the server's TCP port. It stays the same across Restart.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Dir returns the server's private temporary directory: its --dir and the
// home of its log file. Close removes it.
func (s *Server) Dir() string { return s.dir }

// Pid returns the process id of the running redis-server, or 0 if it is not
// running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Running reports whether the server process is alive (paused counts as
// alive).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

// Paused reports whether the server is running but frozen by Pause. The
// replicated topologies use it to leave frozen servers out of their checks
// (a frozen server accepts connections but answers nothing).
func (s *Server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked() && s.paused
}

func (s *Server) runningLocked() bool {
	return s.proc != nil && !s.proc.exited()
}

// Stop shuts the server down gracefully: it resumes it if paused, sends
// SIGTERM and waits for it to exit. If it has not exited after 10 s it is
// killed and Stop returns an error. Stopping a server that is not running is
// a no-op.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return nil
	}
	p := s.proc
	if s.paused {
		p.signalGroup(syscall.SIGCONT)
		s.paused = false
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redisserver: sending SIGTERM: %w", err)
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	err := p.kill()
	s.logfLog("redis-server ignored SIGTERM for %v and was killed", stopTimeout)
	return errors.Join(fmt.Errorf("redisserver: redis-server did not exit within %v of SIGTERM; killed it", stopTimeout), err)
}

// Kill kills the server with SIGKILL (kill -9) and waits for it to exit.
// Killing a server that is not running is a no-op.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return nil
	}
	s.paused = false
	return s.proc.kill()
}

// Restart starts the server again on the same port with the same arguments,
// killing it first if it is still running, and waits until it answers PING.
// Nothing is persisted, so the restarted server is empty.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("redisserver: restart of a closed server")
	}
	if s.runningLocked() {
		s.paused = false
		if err := s.proc.kill(); err != nil {
			return err
		}
	}
	return s.launchLocked(true)
}

// Pause freezes the server with SIGSTOP: connections are still accepted by
// the kernel, but nothing is answered until Resume.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return errors.New("redisserver: pause of a server that is not running")
	}
	if err := s.proc.signalGroup(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("redisserver: sending SIGSTOP: %w", err)
	}
	s.paused = true
	return nil
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return errors.New("redisserver: resume of a server that is not running")
	}
	if err := s.proc.signalGroup(syscall.SIGCONT); err != nil {
		return fmt.Errorf("redisserver: sending SIGCONT: %w", err)
	}
	s.paused = false
	return nil
}

// Close resumes the server if paused, kills it if running, and removes its
// temporary directory. It is idempotent; later calls return nil, and the
// server cannot be restarted afterwards.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.runningLocked() {
		if s.paused {
			s.proc.signalGroup(syscall.SIGCONT)
			s.paused = false
		}
		errs = append(errs, s.proc.kill())
	}
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, fmt.Errorf("redisserver: removing temp dir: %w", err))
	}
	return errors.Join(errs...)
}

// Log returns the contents of the server's log file, followed by anything
// the process wrote to stdout or stderr (such as configuration errors, which
// redis-server prints before it opens its log file). It covers every run
// since Start and is empty after Close.
func (s *Server) Log() string {
	return s.logSince(0, 0)
}

func (s *Server) logSince(logOff, outOff int64) string {
	log := childproc.ReadFrom(filepath.Join(s.dir, logName), logOff)
	if out := childproc.ReadFrom(filepath.Join(s.dir, outName), outOff); strings.TrimSpace(out) != "" {
		log += "--- redis-server stdout/stderr ---\n" + out
	}
	return log
}

// logfLog passes a message and the server log's tail to Options.Logf.
func (s *Server) logfLog(format string, args ...any) {
	if s.logf == nil {
		return
	}
	s.logf("redisserver: "+format+"; server log (%s):\n%s",
		append(args, filepath.Join(s.dir, logName), childproc.Tail(s.Log(), logfTailLines))...)
}

// launchLocked starts a new process and waits until it is ready. When the
// port was picked (fixedPort false), a port that turns out to be taken is
// replaced by a fresh one; a fixed port is retried after a short pause.
func (s *Server) launchLocked(fixedPort bool) error {
	pick := pickPort
	if fixedPort {
		pick = nil
	}
	err := childproc.Launch(&s.port, pick, launchAttempts, errAddrInUse, s.launchOnceLocked)
	if err != nil {
		s.logfLog("redis-server failed to start on port %d", s.port)
	}
	return err
}

func (s *Server) launchOnceLocked() error {
	logPath := filepath.Join(s.dir, logName)
	outPath := filepath.Join(s.dir, outName)
	logOff, outOff := childproc.FileSize(logPath), childproc.FileSize(outPath)

	out, err := os.OpenFile(outPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("redisserver: %w", err)
	}
	args := []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(s.port),
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", logPath,
		"--protected-mode", "no",
		"--daemonize", "no",
	}
	cmd := exec.Command(s.bin, append(args, s.args...)...)
	cmd.Dir = s.dir
	cmd.Stdout = out
	cmd.Stderr = out
	err = childproc.Start(cmd, nil)
	out.Close() // the child has its own copy
	if err != nil {
		return fmt.Errorf("redisserver: starting %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.proc = p
	s.paused = false

	if err := s.waitReady(p); err != nil {
		p.kill()
		tail := childproc.Tail(s.logSince(logOff, outOff), errorTailLines)
		if strings.Contains(strings.ToLower(tail), "address already in use") {
			return fmt.Errorf("%w: redis-server could not bind 127.0.0.1:%d; log tail:\n%s", errAddrInUse, s.port, tail)
		}
		return fmt.Errorf("%w; log tail:\n%s", err, tail)
	}
	return nil
}

// waitReady polls until p answers PING on s.port, p exits, or readyTimeout
// passes.
func (s *Server) waitReady(p *process) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("redisserver: redis-server exited during startup on port %d (%v)", s.port, p.err)
		default:
		}
		err := probe(addr, p)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redisserver: redis-server on port %d not ready after %v: %w", s.port, readyTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// probe sends PING and expects +PONG, then checks with INFO server that the
// answer came from p and not from some other server that happened to own the
// port. It gives up as soon as p exits.
func probe(addr string, p *process) error {
	pid := p.cmd.Process.Pid
	conn, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-p.done:
			conn.Close() // unblock a read from whoever else owns the port
		case <-finished:
		}
	}()
	conn.SetDeadline(time.Now().Add(time.Second))
	r := bufio.NewReader(conn)

	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("redisserver: unexpected reply to PING: %q", strings.TrimSpace(line))
	}

	if _, err := io.WriteString(conn, "INFO server\r\n"); err != nil {
		return err
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "$"))
	if !strings.HasPrefix(line, "$") || err != nil || n < 0 {
		return fmt.Errorf("redisserver: unexpected reply to INFO: %q", strings.TrimSpace(line))
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	want := "process_id:" + strconv.Itoa(pid)
	for _, l := range strings.Split(string(body), "\r\n") {
		if l == want {
			return nil
		}
	}
	return fmt.Errorf("redisserver: port answered by another process, not pid %d", pid)
}

// pickPort is freePort; tests replace it.
var pickPort = freePort

// freePort picks a free loopback port.
func freePort() (int, error) {
	port, err := childproc.FreePort()
	if err != nil {
		return 0, fmt.Errorf("redisserver: %w", err)
	}
	return port, nil
}
