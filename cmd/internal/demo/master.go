package demo

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/redis/go-redis/v9"
)

// lockKey is the one key every worker contends for; it is also the name of
// the fenced resource.
const lockKey = "resource"

// Config configures Run.
type Config struct {
	// Scenarios to run, in order; nil means all.
	Scenarios []Scenario
	// Workers is the number of worker processes (default 8).
	Workers int
	// Iterations per worker; 0 means each scenario's default. The failover
	// scenarios ignore it: their workers iterate until the failovers are
	// done.
	Iterations int
	// RedisURL is the Redis to use; empty starts a private redis-server.
	RedisURL string
	// Store is the fenced store: StoreRedis (default), StoreSQLite or
	// StorePostgres.
	Store string
	// PostgresURL is the database of StorePostgres; empty starts a private
	// PostgreSQL server.
	PostgresURL string
	// WorkerCommand is the argv that starts a worker process (which must run
	// WorkerMain when $FENCELOCK_DEMO_WORKER is set). Required.
	WorkerCommand []string
	// Progress receives live progress; nil for none. With ProgressTTY the
	// progress line is redrawn in place (\r), otherwise plain lines are
	// printed every few seconds.
	Progress    io.Writer
	ProgressTTY bool
	// Verbose forwards the workers' stderr (and their lock client's log) to
	// Progress.
	Verbose bool

	// Pauses and Kills override the scenarios' numbers of paused and killed
	// holders when positive (tests use fewer).
	Pauses, Kills int

	// Failovers overrides the failover scenarios' number of failovers when
	// positive.
	Failovers int
	// ReplicaAck makes the failover scenarios' locks wait for that many
	// replicas to acknowledge each acquire and renewal, for at most
	// ReplicaAckTimeout (redisbackend.WithReplicaAck); 0 is off. The other
	// scenarios' Redis has no replicas: it does not apply to them.
	ReplicaAck        int
	ReplicaAckTimeout time.Duration

	// Backend puts the lock on another store (nil: the demo's Redis). The
	// scenarios that make no sense there are skipped with the reason, the
	// others run as Backend.Adapt says. Workers must be able to find it by
	// name: pass it to WorkerMain too (the built-in ones need not be).
	Backend *Backend
}

// DefaultReplicaAckTimeout is Config.ReplicaAckTimeout's default.
const DefaultReplicaAckTimeout = 200 * time.Millisecond

// MaxReplicaAck is the largest Config.ReplicaAck: the Sentinel group has 2
// replicas (the Cluster has 1 per master).
const MaxReplicaAck = 2

// Report is the outcome of Run.
type Report struct {
	Redis   string    `json:"redis"`             // the demo's own Redis: the lock's, or only the checks' with Backend
	Backend string    `json:"backend,omitempty"` // Config.Backend's name and store, when the lock lived there
	Store   string    `json:"store"`             // the --store asked for
	Workers int       `json:"workers"`
	Results []*Result `json:"scenarios"`
	Elapsed Millis    `json:"elapsed_ms"`
	Pass    bool      `json:"pass"` // no scenario failed
}

// Run runs the scenarios one after the other and reports on each. It
// returns an error only when the demo could not run at all (bad
// configuration, no Redis); a scenario whose expectation was not met is a
// FAIL in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	start := time.Now()
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, progress: newProgress(cfg.Progress, cfg.ProgressTTY)}
	defer r.close()
	if err := r.setUp(ctx); err != nil {
		return nil, errors.New(r.secrets.scrub(err.Error()))
	}
	rep := &Report{Redis: r.redisDesc, Store: cfg.Store, Workers: cfg.Workers, Pass: true}
	if r.store != nil {
		rep.Backend = r.store.Describe()
	}
	for _, sc := range cfg.Scenarios {
		if ctx.Err() != nil {
			break
		}
		var res *Result
		if adapted, why := r.cfg.adapt(sc); why != "" {
			res = newResult(sc, cfg.Workers, sc.Iterations)
			res.Status, res.Reasons, res.Store = StatusSkip, []string{why}, "-"
			r.progress.done(sc.Name, res)
		} else {
			res = r.runScenario(ctx, adapted)
		}
		rep.Results = append(rep.Results, res)
		if res.Status == StatusFail {
			rep.Pass = false
		}
	}
	rep.Elapsed = millis(time.Since(start))
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	return rep, nil
}

func (c *Config) defaults() error {
	if len(c.Scenarios) == 0 {
		c.Scenarios = append([]Scenario(nil), Scenarios...)
	}
	if c.Workers == 0 {
		c.Workers = 8
	}
	if c.Workers < 2 || c.Workers > 64 {
		return fmt.Errorf("invalid workers %d: want 2 to 64 (they contend for one lock)", c.Workers)
	}
	if c.Iterations < 0 || c.Iterations > 10000 {
		return fmt.Errorf("invalid iterations %d: want 1 to 10000 (0 for each scenario's default)", c.Iterations)
	}
	if c.Store == "" {
		c.Store = StoreRedis
	}
	switch c.Store {
	case StoreRedis, StoreSQLite, StorePostgres:
	default:
		return fmt.Errorf("invalid store %q: want %s", c.Store, strings.Join(StoreKinds, ", "))
	}
	if len(c.WorkerCommand) == 0 {
		return errors.New("demo: Config.WorkerCommand is empty")
	}
	if c.Failovers < 0 || c.Failovers > MaxFailovers {
		return fmt.Errorf("invalid failovers %d: want 1 to %d (0 for each failover scenario's default)", c.Failovers, MaxFailovers)
	}
	if c.ReplicaAck < 0 || c.ReplicaAck > MaxReplicaAck {
		return fmt.Errorf("invalid replica ack %d: want 0 (off) to %d (the Sentinel group's replicas)", c.ReplicaAck, MaxReplicaAck)
	}
	if c.ReplicaAckTimeout == 0 {
		c.ReplicaAckTimeout = DefaultReplicaAckTimeout
	}
	if c.ReplicaAckTimeout < time.Millisecond || c.ReplicaAckTimeout > MaxReplicaAckTimeout {
		return fmt.Errorf("invalid replica ack timeout %v: want 1ms to %v", c.ReplicaAckTimeout, MaxReplicaAckTimeout)
	}
	return nil
}

// MaxFailovers bounds Config.Failovers.
const MaxFailovers = 1000

// MaxReplicaAckTimeout bounds Config.ReplicaAckTimeout: well under the
// failover scenarios' lease, which every acquire and renewal may spend it
// from.
const MaxReplicaAckTimeout = time.Second

// runner holds what the scenarios of one Run share.
type runner struct {
	cfg       Config
	progress  *progress
	srv       *redisserver.Server // the private server; nil with an external Redis
	redisURL  string
	redisDesc string
	rdb       *redis.Client // the master's own connection
	runID     string
	tmpDir    string // SQLite files
	pg        *pgHandle
	store     LockStore // Config.Backend's servers; nil on the demo's Redis
	closers   []func()
	secrets   secrets // the passwords of the URLs: never shown
}

// addSecret adds a password that no output may show.
func (r *runner) addSecret(s string) {
	r.secrets.add(s)
	r.progress.secrets = r.secrets
}

func (r *runner) setUp(ctx context.Context) error {
	var b [4]byte
	rand.Read(b[:])
	r.runID = hex.EncodeToString(b[:])

	if r.cfg.RedisURL == "" {
		srv, err := redisserver.Start(redisserver.Options{})
		if err != nil {
			return fmt.Errorf("starting a private redis-server: %w (or pass --redis / set REDIS_URL)", err)
		}
		r.srv = srv
		r.closers = append(r.closers, func() { srv.Close() })
		r.redisURL = "redis://" + srv.Addr() + "/0"
		r.redisDesc = "private redis-server " + srv.Addr()
		r.progress.logf("started a private redis-server on %s", srv.Addr())
	} else {
		r.redisURL = r.cfg.RedisURL
		if !strings.Contains(r.redisURL, "://") {
			r.redisURL = "redis://" + r.redisURL
		}
		r.redisDesc = "external " + redactURL(r.redisURL)
	}
	opt, err := parseRedisURL(r.redisURL)
	if err != nil {
		return err
	}
	r.addSecret(opt.Password)
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = time.Second, 2*time.Second, 2*time.Second
	r.rdb = redis.NewClient(opt)
	r.closers = append(r.closers, func() { r.rdb.Close() })
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.rdb.Ping(pctx).Err(); err != nil {
		if redis.IsAuthError(err) || redis.IsPermissionError(err) {
			//lint:ignore ST1005 Redis is a name; the message is printed as a line of its own
			return fmt.Errorf("Redis at %s refused the credentials: %s", redactURL(r.redisURL), r.secrets.scrub(err.Error()))
		}
		return fmt.Errorf("cannot reach Redis at %s: %s", redactURL(r.redisURL), r.secrets.scrub(err.Error()))
	}

	dir, err := os.MkdirTemp("", "fencelock-demo-")
	if err != nil {
		return err
	}
	r.tmpDir = dir
	r.closers = append(r.closers, func() { os.RemoveAll(dir) })

	if b := r.cfg.Backend; b != nil {
		store, err := b.Start(ctx, r.progress.logf)
		if err != nil {
			return fmt.Errorf("starting the %s backend's servers: %w", b.Name, err)
		}
		r.store = store
		r.closers = append(r.closers, func() { store.Close() })
		r.progress.logf("the lock lives on %s; the checks stay on %s", store.Describe(), r.redisDesc)
	}

	if r.cfg.Store == StorePostgres {
		pg, err := openPostgres(r.cfg.PostgresURL)
		if err != nil {
			return err
		}
		r.pg = pg
		r.addSecret(pg.password)
		r.closers = append(r.closers, pg.close)
		if pg.private {
			r.progress.logf("started a private PostgreSQL server")
		}
	}
	return nil
}

// close undoes setUp, newest first. Keys of an external Redis are removed
// per scenario.
func (r *runner) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

// proc is one worker process, seen from the master.
type proc struct {
	id     int
	cmd    *exec.Cmd
	pid    int
	stdin  io.WriteCloser
	stderr *tailBuffer
	done   chan struct{} // closed once the process has been waited for
	err    error         // cmd.Wait's result, after done

	killed atomic.Bool // kill -9ed by the master on purpose
	killAt atomic.Int64

	sendMu sync.Mutex // one line at a time on stdin
}

// send writes a line to the worker's stdin; a worker gone already is no
// error.
func (p *proc) send(line string) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	fmt.Fprintln(p.stdin, line)
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// message is an event from a worker, or (exited) the end of its stdout.
type message struct {
	p      *proc
	ev     event
	exited bool
}

// startWorkers starts n worker processes, the i-th with config(i) and its
// events on msgs, and waits until every one is ready; early are the other
// events that came meanwhile. stop, which the caller defers whatever
// happened (also with err), ends them all: no worker outlives its
// scenario, and none stays stopped. procs has a process per worker, nil
// for one that could not be started.
func (r *runner) startWorkers(ctx context.Context, n int, config func(i int) workerConfig, msgs chan message) (procs []*proc, early []message, stop func(), err error) {
	quit := make(chan struct{})
	procs = make([]*proc, n)
	stop = func() {
		close(quit)
		for _, p := range procs {
			if p != nil && p.alive() {
				p.signal(syscall.SIGCONT)
				p.signal(syscall.SIGKILL)
			}
		}
	}
	for i := range procs {
		p, err := r.startWorker(i, config(i), msgs, quit)
		if err != nil {
			return procs, nil, stop, err
		}
		procs[i] = p
	}
	early, err = awaitReady(ctx, procs, msgs)
	return procs, early, stop, err
}

// startWorker starts worker id with cfg; its events go to msgs, until quit
// is closed.
func (r *runner) startWorker(id int, wcfg workerConfig, msgs chan<- message, quit <-chan struct{}) (*proc, error) {
	raw, err := json.Marshal(wcfg)
	if err != nil {
		return nil, err
	}
	argv := r.cfg.WorkerCommand
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), WorkerEnv+"="+string(raw))
	// Own process group: Ctrl-C reaches the master only, which then stops
	// the workers in order (closing their stdin).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &proc{id: id, cmd: cmd, stderr: newTailBuffer(40), done: make(chan struct{})}
	if r.cfg.Verbose && r.cfg.Progress != nil {
		cmd.Stderr = io.MultiWriter(p.stderr, &prefixWriter{w: r.progress, prefix: fmt.Sprintf("worker %d: ", id)})
	} else {
		cmd.Stderr = p.stderr
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting worker %d (%s): %w", id, argv[0], err)
	}
	p.pid = cmd.Process.Pid
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			var ev event
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue // a line cut short by kill -9
			}
			select {
			case msgs <- message{p: p, ev: ev}:
			case <-quit:
			}
		}
		io.Copy(io.Discard, stdout)
		p.err = cmd.Wait()
		close(p.done)
		select {
		case msgs <- message{p: p, exited: true}:
		case <-quit:
		}
	}()
	return p, nil
}

// signal sends sig to the worker process (not its group: it has no children).
func (p *proc) signal(sig syscall.Signal) error {
	if !p.alive() {
		return nil
	}
	err := syscall.Kill(p.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// tailBuffer keeps the last lines written to it.
type tailBuffer struct {
	mu    sync.Mutex
	max   int
	lines []string
	part  string
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.part + string(b)
	parts := strings.Split(s, "\n")
	t.part = parts[len(parts)-1]
	for _, l := range parts[:len(parts)-1] {
		t.lines = append(t.lines, l)
		if len(t.lines) > t.max {
			t.lines = t.lines[1:]
		}
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	if t.part != "" {
		lines = append(lines[:len(lines):len(lines)], t.part)
	}
	return strings.Join(lines, "\n")
}

// prefixWriter writes whole lines to a progress printer with a prefix.
type prefixWriter struct {
	w      *progress
	prefix string
	part   string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	s := p.part + string(b)
	parts := strings.Split(s, "\n")
	p.part = parts[len(parts)-1]
	for _, l := range parts[:len(parts)-1] {
		p.w.logf("%s%s", p.prefix, l)
	}
	return len(b), nil
}
