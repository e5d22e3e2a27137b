// Package pgserver starts and stops throwaway real PostgreSQL servers for
// tests and the demo.
//
// Every server is a fresh cluster made by initdb in its own private
// temporary directory, runs as a child postgres process in its own process
// group, listens on a loopback port (and a Unix-domain socket in its
// directory) and trusts every local connection. Durability is traded for
// speed (fsync, synchronous_commit and full_page_writes are off), so a
// server is only good for throwaway data. When this process runs as root,
// initdb and postgres run as the postgres system user (see EnvUser), as
// they refuse to run as root. Close removes a server's directory; one left
// by a process that died without calling Close is removed by the next
// Start, in any process. The package is Unix-only.
//
// It is the test harness of fencelock's own modules (the library, cmd,
// etcdbackend, fencelockprom), public so that each of them can use it; it
// is not part of the library's API, and no library package imports it.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"github.com/fencelock/fencelock/testing/childproc"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// User is the cluster's superuser, who owns database Database. No
	// password is needed.
	User = "fencelock"
	// Database is the database that Start creates and URL names.
	Database = "fencelock"

	// initdbTimeout bounds initdb.
	initdbTimeout = 2 * time.Minute
	// readyTimeout bounds how long one launch waits for a working
	// connection.
	readyTimeout = 20 * time.Second
	// setupTimeout bounds creating database Database.
	setupTimeout = 20 * time.Second
	// stopTimeout bounds how long Close waits after SIGINT before SIGKILL.
	stopTimeout = 10 * time.Second
	// launchAttempts is how many times a launch that fails with "address
	// already in use" is tried (with a fresh port when the port was picked).
	launchAttempts = 5
	// errorTailLines is how many log lines are quoted in errors.
	errorTailLines = 20
	// logfTailLines is how many log lines are passed to Options.Logf.
	logfTailLines = 200

	dataName   = "data"         // the cluster (PGDATA), inside the private dir
	logName    = "postgres.log" // postgres's stdout and stderr
	initdbName = "initdb.log"   // initdb's stdout and stderr
)

// errAddrInUse marks a launch that failed because the port was taken.
var errAddrInUse = errors.New("pgserver: port already in use")

// Options configures Start.
type Options struct {
	// Port is the TCP port to listen on; 0 picks a free loopback port.
	Port int
	// Logf, if set, receives the server's log when it fails to start or
	// has to be killed after a fast shutdown timed out. It is only called
	// synchronously from Start and Close.
	Logf func(format string, args ...any)
}

// Server is a postgres child process listening on 127.0.0.1. Its methods
// are safe for concurrent use.
type Server struct {
	binDir string
	dir    string
	id     identity
	logf   func(format string, args ...any)
	port   int // fixed once Start returns
	lock   *os.File

	mu     sync.Mutex
	proc   *process
	closed bool
}

// liveLocks keeps every open owner lock file reachable, so that the
// finalizer of a leaked Server's file cannot release its lock (and let
// another process reap its directory) while its postgres runs.
var liveLocks sync.Map // *os.File -> struct{}

// process is one run of postgres; a goroutine calls cmd.Wait exactly once
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

// kill sends SIGKILL to p's process group (Setpgid made its id p's pid) and
// waits for p to be reaped. The postmaster's own children are not in that
// group (each calls setsid), but they exit by themselves as soon as they
// notice that the postmaster died.
func (p *process) kill() error {
	var err error
	if !p.exited() {
		if err = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); errors.Is(err, syscall.ESRCH) {
			err = nil
		}
		if err != nil {
			err = fmt.Errorf("pgserver: killing postgres: %w", err)
			p.cmd.Process.Kill() // fall back to the process itself
		}
	}
	<-p.done
	return err
}

// Start makes a fresh cluster with initdb (superuser User, trust
// authentication, UTF8, locale C) in a private temporary directory, starts
// postgres on it, waits until a connection to 127.0.0.1 can run a query
// (up to 20 s), and creates the database Database. The error wraps
// ErrNotFound if the binaries cannot be found. Call Close when done.
func Start(opts Options) (*Server, error) {
	binDir, err := Find()
	if err != nil {
		return nil, err
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("pgserver: invalid port %d", opts.Port)
	}
	id, err := serverIdentity()
	if err != nil {
		return nil, err
	}
	base, err := baseDir(id)
	if err != nil {
		return nil, err
	}
	reapOnce(base)
	dir, err := os.MkdirTemp(base, dirPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("pgserver: creating temp dir: %w", err)
	}
	s := &Server{binDir: binDir, dir: dir, id: id, logf: opts.Logf, port: opts.Port}
	if err := s.setup(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// setup does the work of Start once the private directory exists.
func (s *Server) setup() error {
	lock, err := lockDir(s.dir)
	if err != nil {
		return err
	}
	s.lock = lock
	liveLocks.Store(lock, struct{}{})
	if s.id.cred != nil {
		if err := os.Chown(s.dir, s.id.uid, s.id.gid); err != nil {
			return fmt.Errorf("pgserver: handing %s to %s: %w", s.dir, s.id.name, err)
		}
	}
	if err := s.initdb(); err != nil {
		return err
	}
	s.mu.Lock()
	err = s.launchLocked(s.port != 0)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.urlFor("postgres"))
	if err != nil {
		return fmt.Errorf("pgserver: connecting to create database %s: %w", Database, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{Database}.Sanitize()); err != nil {
		return fmt.Errorf("pgserver: creating database %s: %w", Database, err)
	}
	return nil
}

// initdb runs initdb into s.dir/data.
func (s *Server) initdb() error {
	logPath := filepath.Join(s.dir, initdbName)
	out, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), initdbTimeout)
	defer cancel()
	bin := filepath.Join(s.binDir, "initdb")
	cmd := exec.CommandContext(ctx, bin,
		"-D", filepath.Join(s.dir, dataName),
		"-A", "trust",
		"-U", User,
		"-E", "UTF8",
		"--locale=C",
		"--no-sync",
	)
	cmd.Dir = s.dir
	cmd.Env = childEnv()
	cmd.Stdout = out
	cmd.Stderr = out
	if err := childproc.Start(cmd, s.id.cred); err != nil {
		return fmt.Errorf("pgserver: starting %s as %s: %w", bin, s.id.name, err)
	}
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("timed out after %v", initdbTimeout)
		}
		return fmt.Errorf("pgserver: %s as %s failed: %w; output:\n%s",
			bin, s.id.name, err, childproc.Tail(childproc.ReadFrom(logPath, 0), errorTailLines))
	}
	return nil
}

// childEnv is the environment of initdb and postgres: ours, without the
// libpq (PG*) and locale variables, and with LC_ALL=C so that messages are
// in English.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "PG") || strings.HasPrefix(name, "LC_") || name == "LANG" || name == "LANGUAGE" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// URL returns the connection URL of database Database as User:
// postgres://fencelock@127.0.0.1:PORT/fencelock?sslmode=disable.
func (s *Server) URL() string { return s.urlFor(Database) }

func (s *Server) urlFor(database string) string {
	return "postgres://" + User + "@" + s.Addr() + "/" + database + "?sslmode=disable"
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Dir returns the server's private temporary directory. It holds the
// cluster (in subdirectory data), the log and the Unix-domain socket.
// Close removes it.
func (s *Server) Dir() string { return s.dir }

// Pid returns the process id of the postmaster, or 0 if it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Close shuts the server down (a fast shutdown: SIGINT, which rolls back
// open transactions and disconnects clients), killing its process group if
// it has not exited within 10 s, and removes its temporary directory. It is
// idempotent; later calls return nil.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if p := s.proc; p != nil && !p.exited() {
		errs = append(errs, s.stopLocked(p))
	}
	if err := removeAll(s.dir); err != nil {
		errs = append(errs, fmt.Errorf("pgserver: removing temp dir: %w", err))
	}
	if s.lock != nil {
		liveLocks.Delete(s.lock)
		s.lock.Close()
	}
	return errors.Join(errs...)
}

// removeAll is os.RemoveAll, retried for a while in case a dying child of
// a killed postmaster is still writing into dir.
func removeAll(dir string) error {
	var err error
	for range 20 {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// stopLocked makes a fast shutdown of p, killing it after stopTimeout.
func (s *Server) stopLocked(p *process) error {
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return errors.Join(fmt.Errorf("pgserver: sending SIGINT: %w", err), p.kill())
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	err := p.kill()
	s.logfLog("postgres ignored SIGINT for %v and was killed", stopTimeout)
	return errors.Join(fmt.Errorf("pgserver: postgres did not exit within %v of SIGINT; killed it", stopTimeout), err)
}

// Log returns what postgres wrote to its stdout and stderr (its log) since
// Start. It is empty after Close.
func (s *Server) Log() string {
	return childproc.ReadFrom(filepath.Join(s.dir, logName), 0)
}

// logfLog passes a message and the server log's tail to Options.Logf.
func (s *Server) logfLog(format string, args ...any) {
	if s.logf == nil {
		return
	}
	s.logf("pgserver: "+format+"; server log (%s):\n%s",
		append(args, filepath.Join(s.dir, logName), childproc.Tail(s.Log(), logfTailLines))...)
}

// launchLocked starts postgres and waits until it is ready. When the port
// was picked (fixedPort false), a port that turns out to be taken is
// replaced by a fresh one; a fixed port is retried after a short pause.
func (s *Server) launchLocked(fixedPort bool) error {
	pick := freePort
	if fixedPort {
		pick = nil
	}
	err := childproc.Launch(&s.port, pick, launchAttempts, errAddrInUse, s.launchOnceLocked)
	if err != nil {
		s.logfLog("postgres failed to start on port %d", s.port)
	}
	return err
}

func (s *Server) launchOnceLocked() error {
	logPath := filepath.Join(s.dir, logName)
	logOff := childproc.FileSize(logPath)
	out, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	dataDir := filepath.Join(s.dir, dataName)
	bin := filepath.Join(s.binDir, "postgres")
	cmd := exec.Command(bin,
		"-D", dataDir,
		"-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+quoteListItem(s.dir),
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
		"-c", "logging_collector=off",
	)
	cmd.Dir = s.dir
	cmd.Env = childEnv()
	cmd.Stdout = out
	cmd.Stderr = out
	err = childproc.Start(cmd, s.id.cred)
	out.Close() // the child has its own copy
	if err != nil {
		return fmt.Errorf("pgserver: starting %s as %s: %w", bin, s.id.name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.proc = p

	if err := s.waitReady(p, dataDir); err != nil {
		p.kill()
		tail := childproc.Tail(childproc.ReadFrom(logPath, logOff), errorTailLines)
		if strings.Contains(strings.ToLower(tail), "address already in use") {
			return fmt.Errorf("%w: postgres could not bind 127.0.0.1:%d; log tail:\n%s", errAddrInUse, s.port, tail)
		}
		return fmt.Errorf("%w; log tail:\n%s", err, tail)
	}
	return nil
}

// quoteListItem quotes a directory for a list setting such as
// unix_socket_directories.
func quoteListItem(dir string) string {
	return `"` + strings.ReplaceAll(dir, `"`, `""`) + `"`
}

// waitReady polls until a connection to s.port runs a query and shows that
// it reached p's cluster (and not some other server that happened to own
// the port), p exits, or readyTimeout passes.
func (s *Server) waitReady(p *process, dataDir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	go func() { // stop waiting as soon as p exits
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		err := probe(ctx, s.urlFor("postgres"), dataDir)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("pgserver: postgres exited during startup on port %d (%v)", s.port, p.err)
		case <-ctx.Done():
			return fmt.Errorf("pgserver: postgres on port %d not ready after %v: %w", s.port, readyTimeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// probe connects to url and checks that the server's data directory is
// dataDir.
func probe(ctx context.Context, url, dataDir string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var got string
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&got); err != nil {
		return err
	}
	if filepath.Clean(got) != filepath.Clean(dataDir) {
		return fmt.Errorf("pgserver: port answered by another server (data directory %s)", got)
	}
	return nil
}

// freePort picks a free loopback port.
func freePort() (int, error) {
	port, err := childproc.FreePort()
	if err != nil {
		return 0, fmt.Errorf("pgserver: %w", err)
	}
	return port, nil
}
