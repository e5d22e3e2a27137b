// Package etcdserver runs private, throwaway etcd clusters for the
// etcdbackend tests and the etcd demo (cmd/etcddemo):
// N members on free loopback ports, each a child process with its own data
// directory, which a test can kill -9, restart, pause (SIGSTOP) and resume.
//
// The etcd binary is the server of go.etcd.io/etcd/server/v3, built from
// the module in ./etcd (a module of its own, so that the server's
// dependencies stay out of etcdbackend's go.mod) with `go build` into the
// temporary directory, once per version: a clean clone needs only the Go
// toolchain and the module proxy. FENCELOCK_ETCD names another etcd binary
// to use instead (such as Debian's etcd-server package).
//
// It is part of the test harness of fencelock's own modules, public so
// that etcdbackend's tests and the cmd module's etcd demo can both use it;
// it is not part of etcdbackend's API.
package etcdserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/testing/childproc"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// EnvBinary names the environment variable that, when set, is the path of
// the etcd binary to run instead of building one.
const EnvBinary = "FENCELOCK_ETCD"

// ErrNoBinary is matched by the error of Binary (and Start) when no etcd
// binary could be had: FENCELOCK_ETCD names no executable, or building one
// failed (no Go toolchain, no module proxy).
var ErrNoBinary = errors.New("etcdserver: no etcd binary")

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary returns the path of the etcd binary, building it on first use.
func Binary() (string, error) {
	buildOnce.Do(func() { buildPath, buildErr = findOrBuild() })
	return buildPath, buildErr
}

func findOrBuild() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%w: %s=%s is not an executable file", ErrNoBinary, EnvBinary, p)
		}
		return p, nil
	}
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("%w: cannot locate the etcd module's source", ErrNoBinary)
	}
	src := filepath.Join(filepath.Dir(self), "etcd")
	// The binary is kept in the temporary directory under a name derived
	// from the module's files, so that every test binary of a run (and
	// later runs) link it once; a rename makes it appear whole.
	h := sha256.New()
	h.Write([]byte(runtime.Version()))
	for _, f := range []string{"go.mod", "go.sum", "main.go"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", fmt.Errorf("%w: %v", ErrNoBinary, err)
		}
		h.Write(b)
	}
	dir := filepath.Join(os.TempDir(), "fencelock-etcd-"+hex.EncodeToString(h.Sum(nil))[:16])
	bin := filepath.Join(dir, "etcd")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoBinary, err)
	}
	tmp, err := os.CreateTemp(dir, "etcd-build-*")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoBinary, err)
	}
	tmp.Close()
	cmd := exec.Command("go", "build", "-o", tmp.Name(), ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("%w: building go.etcd.io/etcd/server/v3 in %s: %v\n%s\n"+
			"(the tests need the Go toolchain and the Go module proxy to build etcd, "+
			"or %s=/path/to/etcd, e.g. from Debian's etcd-server package)",
			ErrNoBinary, src, err, tail(string(out), 20), EnvBinary)
	}
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoBinary, err)
	}
	return bin, nil
}

// Options configure a cluster.
type Options struct {
	// Logf, if set, receives a line for each member started and stopped.
	Logf func(format string, args ...any)
	// Args are appended to every member's arguments.
	Args []string
}

// Cluster is a running etcd cluster of private members.
type Cluster struct {
	bin     string
	dir     string
	token   string
	opts    Options
	members []*Member
}

// Member is one etcd process of a Cluster.
type Member struct {
	Name      string
	ClientURL string // http://127.0.0.1:port, the client endpoint
	PeerURL   string
	dataDir   string
	logPath   string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has been reaped
	paused bool
}

// Start starts a cluster of n members and waits until it has a leader and
// every member answers.
func Start(n int, opts Options) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("etcdserver: a cluster needs at least one member, not %d", n)
	}
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencelock-etcd-cluster-*")
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, dir: dir, token: filepath.Base(dir), opts: opts}
	// The ports are picked free and released before etcd binds them, so
	// another process may take one meanwhile: then start over with new ones.
	for attempt := 1; ; attempt++ {
		err = c.startNew(n)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			break
		}
		c.stopAll()
		os.RemoveAll(dir)
		os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// startNew makes n members on fresh ports, starts them and waits for them.
func (c *Cluster) startNew(n int) error {
	c.members = nil
	var initial []string
	for i := range n {
		cport, err := childproc.FreePort()
		if err != nil {
			return err
		}
		pport, err := childproc.FreePort()
		if err != nil {
			return err
		}
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", cport),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", pport),
			dataDir:   filepath.Join(c.dir, fmt.Sprintf("m%d", i)),
			logPath:   filepath.Join(c.dir, fmt.Sprintf("m%d.log", i)),
		}
		c.members = append(c.members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.members {
		if err := c.launch(m, strings.Join(initial, ","), "new"); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return c.WaitHealthy(ctx)
}

// launch starts m's process. state is "new" for the first start of a
// cluster, "existing" for a restart (the data directory says the rest).
func (c *Cluster) launch(m *Member, initial, state string) error {
	args := []string{
		"--name", m.Name,
		"--data-dir", m.dataDir,
		"--listen-client-urls", m.ClientURL,
		"--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", initial,
		"--initial-cluster-state", state,
		"--initial-cluster-token", c.token,
		"--log-level", "warn",
		// A killed process loses nothing that was written (the kernel
		// keeps it); only a machine crash would. Without fsync, a busy
		// 2-core machine does not stall the cluster on the disk.
		"--unsafe-no-fsync",
	}
	args = append(args, c.opts.Args...)
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := childproc.Start(cmd, nil); err != nil {
		return fmt.Errorf("etcdserver: starting %s: %w", m.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	m.mu.Lock()
	m.cmd, m.exited, m.paused = cmd, exited, false
	m.mu.Unlock()
	c.logf("etcdserver: started %s (pid %d) on %s", m.Name, cmd.Process.Pid, m.ClientURL)
	return nil
}

// WaitHealthy waits until every running member reports a healthy cluster
// (a leader, and its own reads served). A member that exits meanwhile
// ends the wait with its log.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	for _, m := range c.members {
		if err := m.waitHealthy(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (m *Member) waitHealthy(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	for {
		m.mu.Lock()
		exited := m.exited
		m.mu.Unlock()
		if exited == nil {
			return nil // not running: nothing to wait for
		}
		select {
		case <-exited:
			return fmt.Errorf("etcdserver: %s exited:\n%s", m.Name, tail(m.Log(), 20))
		default:
		}
		resp, err := client.Get(m.ClientURL + "/health")
		if err == nil {
			var body [256]byte
			k, _ := resp.Body.Read(body[:])
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body[:k]), `"true"`) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdserver: %s not healthy: %w (last error %v); log:\n%s", m.Name, ctx.Err(), err, tail(m.Log(), 20))
		case <-exited:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Kill kills member i with SIGKILL and waits until it is gone.
func (c *Cluster) Kill(i int) { c.members[i].signalAndWait(syscall.SIGKILL) }

// Stop stops member i with SIGTERM (a clean shutdown) and waits.
func (c *Cluster) Stop(i int) { c.members[i].signalAndWait(syscall.SIGTERM) }

func (m *Member) signalAndWait(sig syscall.Signal) {
	m.mu.Lock()
	cmd, exited, paused := m.cmd, m.exited, m.paused
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	if paused {
		cmd.Process.Signal(syscall.SIGCONT) // a stopped process handles SIGTERM only when resumed
	}
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
	m.mu.Lock()
	m.cmd, m.exited, m.paused = nil, nil, false
	m.mu.Unlock()
}

// Restart starts member i again, on its ports and data, after Kill or
// Stop; it does not wait for it (see WaitHealthy).
func (c *Cluster) Restart(i int) error {
	m := c.members[i]
	m.mu.Lock()
	running := m.cmd != nil
	m.mu.Unlock()
	if running {
		return fmt.Errorf("etcdserver: %s is running", m.Name)
	}
	var initial []string
	for _, o := range c.members {
		initial = append(initial, o.Name+"="+o.PeerURL)
	}
	return c.launch(m, strings.Join(initial, ","), "existing")
}

// Pause stops member i with SIGSTOP: it answers nothing, to its clients or
// its peers, until Resume: a member cut off from everyone.
func (c *Cluster) Pause(i int) {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil && !m.paused {
		m.cmd.Process.Signal(syscall.SIGSTOP)
		m.paused = true
	}
}

// Resume continues member i after Pause.
func (c *Cluster) Resume(i int) {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil && m.paused {
		m.cmd.Process.Signal(syscall.SIGCONT)
		m.paused = false
	}
}

// Leader returns the index of the member that leads the cluster, asking
// the running members that are not paused.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	var lastErr error
	for _, m := range c.members {
		m.mu.Lock()
		up := m.cmd != nil && !m.paused
		m.mu.Unlock()
		if !up {
			continue
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: 2 * time.Second, Logger: nopLogger()})
		if err != nil {
			lastErr = err
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, m.ClientURL)
		cancel()
		cli.Close()
		if err != nil {
			lastErr = err
			continue
		}
		if st.Leader == 0 {
			lastErr = fmt.Errorf("%s knows no leader", m.Name)
			continue
		}
		for i, o := range c.members {
			if o.id(ctx, st.Leader) {
				return i, nil
			}
		}
		lastErr = fmt.Errorf("leader %x is not a member", st.Leader)
	}
	return -1, fmt.Errorf("etcdserver: no leader: %v", lastErr)
}

// id reports whether m's member ID is id (asking m itself).
func (m *Member) id(ctx context.Context, id uint64) bool {
	m.mu.Lock()
	up := m.cmd != nil && !m.paused
	m.mu.Unlock()
	if !up {
		return false
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: 2 * time.Second, Logger: nopLogger()})
	if err != nil {
		return false
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := cli.Status(sctx, m.ClientURL)
	return err == nil && st.Header.MemberId == id
}

// Log returns the member's log (every start of it).
func (m *Member) Log() string { return childproc.ReadFrom(m.logPath, 0) }

func (c *Cluster) stopAll() {
	for _, m := range c.members {
		m.signalAndWait(syscall.SIGKILL)
	}
}

// Close kills every member and removes the data directories.
func (c *Cluster) Close() error {
	c.stopAll()
	return os.RemoveAll(c.dir)
}

func tail(s string, n int) string { return childproc.Tail(s, n) }

// Endpoints returns the client URLs of every member.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// Members returns the cluster's members, in the order they were started.
func (c *Cluster) Members() []*Member { return c.members }

func (c *Cluster) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}
