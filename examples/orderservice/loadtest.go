package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/examples/internal/exitcode"
	"github.com/fencelock/fencelock/testing/pgserver"
	"github.com/fencelock/fencelock/testing/redisserver"
)

// EnvChild is set to "1" in the environment of the instances the load test
// starts. The service itself ignores it; the package's tests use it to run
// the test binary as an instance.
const EnvChild = "ORDERSERVICE_LOADTEST_CHILD"

// LoadtestConfig sizes and configures a load test.
type LoadtestConfig struct {
	Instances   int           // service instances (child processes), at least 2
	Requests    int           // phase 1: deduct requests of 1 item
	Stock       int           // phase 1: initial stock
	Concurrency int           // requests in flight
	RequestNos  int           // phase 2: distinct request numbers
	Duplicates  int           // phase 2: requests per request number
	DB          string        // "auto", "sqlite" or "postgres"
	NoLock      bool          // pass --no-lock to the instances (a demonstration of the failure)
	WorkDelay   time.Duration // passed to the instances
	LockWait    time.Duration // passed to the instances
	Retries     int           // retries of a 503 with Retry-After, per request
	JSON        bool          // print the report as JSON
	Keep        bool          // keep the work directory (instance logs, SQLite file)
	Timeout     time.Duration // bound on the whole run
	RedisURL    string        // from REDIS_URL: use it instead of a private redis-server
	DatabaseURL string        // from DATABASE_URL: use it for postgres instead of a private server
	Exe         string        // the binary to start as instances; default: this one
}

// parseLoadtestConfig reads the loadtest flags, and REDIS_URL and
// DATABASE_URL through getenv.
func parseLoadtestConfig(args []string, getenv func(string) string, output io.Writer) (LoadtestConfig, error) {
	def := defaultConfig()
	cfg := LoadtestConfig{RedisURL: getenv(EnvRedisURL), DatabaseURL: getenv(EnvDatabaseURL)}
	fs := flag.NewFlagSet("orderservice loadtest", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.Usage = func() {
		fmt.Fprintf(output, `Usage: orderservice loadtest [flags]

Starts several instances of this binary on loopback ports, sharing one Redis
(a private redis-server unless %s is set) and one database (PostgreSQL:
%s or a private server; else one SQLite file), then
  phase 1: fires concurrent deductions of 1 item at one product, round-robin
           over the instances; PASS if nothing is oversold: no more
           successes than -stock, and the final stock and the order rows
           agree with the successes;
  phase 2: fires -request-nos x -duplicates concurrent POST /api/orders;
           PASS if no request number has two orders and every success of
           a request number carries the same body.
A 503 with Retry-After (busy: the lock wait ran out) is retried after the
time it names, up to -retries times. What is still refused then is
availability, reported beside the verdict and never a FAIL: raise
-lock-wait. A FAIL is a safety failure (oversold stock, a duplicate order,
a differing replay) or an unexpected answer (a 500).
Exit status: 0 PASS, 1 FAIL, 2 the test could not run, 130 interrupted.

Flags:
`, EnvRedisURL, EnvDatabaseURL)
		fs.PrintDefaults()
	}
	fs.IntVar(&cfg.Instances, "instances", 2, "service instances to start (at least 2)")
	fs.IntVar(&cfg.Requests, "requests", 1000, "phase 1: concurrent deduct requests (1 item each)")
	fs.IntVar(&cfg.Stock, "stock", 100, "phase 1: initial stock of the product")
	fs.IntVar(&cfg.Concurrency, "concurrency", 100, "requests in flight at once")
	fs.IntVar(&cfg.RequestNos, "request-nos", 20, "phase 2: distinct request numbers")
	fs.IntVar(&cfg.Duplicates, "duplicates", 10, "phase 2: requests sent per request number")
	fs.StringVar(&cfg.DB, "db", "auto", "database: auto (PostgreSQL if available, else SQLite), sqlite or postgres")
	fs.BoolVar(&cfg.NoLock, "no-lock", false, "start the instances with --no-lock: a DEMONSTRATION OF THE FAILURE (oversell, duplicates); the run is expected to FAIL")
	fs.DurationVar(&cfg.WorkDelay, "work-delay", def.WorkDelay, "instances' simulated work between reading the stock and writing")
	fs.DurationVar(&cfg.LockWait, "lock-wait", def.LockWait, "instances' wait for a busy lock before 503 busy")
	fs.IntVar(&cfg.Retries, "retries", 3, "retries of a request answered 503 with Retry-After, after the time it names")
	fs.BoolVar(&cfg.JSON, "json", false, "print the report as JSON on stdout")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the work directory (instance logs, SQLite file) and print its path")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return LoadtestConfig{}, err
	}
	if fs.NArg() > 0 {
		return LoadtestConfig{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return cfg, cfg.validate()
}

func (c LoadtestConfig) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Instances >= 2, "invalid -instances %d: at least 2", c.Instances)
	check(c.Requests >= 1, "invalid -requests %d: at least 1", c.Requests)
	check(c.Stock >= 0, "invalid -stock %d: must not be negative", c.Stock)
	check(c.Concurrency >= 1, "invalid -concurrency %d: at least 1", c.Concurrency)
	check(c.RequestNos >= 1, "invalid -request-nos %d: at least 1", c.RequestNos)
	check(c.Duplicates >= 1, "invalid -duplicates %d: at least 1", c.Duplicates)
	check(c.DB == "auto" || c.DB == "sqlite" || c.DB == "postgres", "invalid -db %q: want auto, sqlite or postgres", c.DB)
	check(c.WorkDelay >= 0, "invalid -work-delay %v: must not be negative", c.WorkDelay)
	check(c.LockWait >= 0, "invalid -lock-wait %v: must not be negative", c.LockWait)
	check(c.Retries >= 0 && c.Retries <= 100, "invalid -retries %d: want 0 to 100", c.Retries)
	check(c.Timeout > 0, "invalid -timeout %v: must be positive", c.Timeout)
	return errors.Join(errs...)
}

// Report is the outcome of a load test.
type Report struct {
	Instances []string `json:"instances"` // their addresses
	Redis     string   `json:"redis"`
	Database  string   `json:"database"` // "sqlite" or "postgres"
	Store     string   `json:"store"`    // which one, redacted
	NoLock    bool     `json:"noLock"`
	WorkDelay string   `json:"workDelay"`
	LockWait  string   `json:"lockWait"`
	WorkDir   string   `json:"workDir,omitempty"` // kept with -keep

	Deduct DeductReport `json:"deduct"`
	Orders OrdersReport `json:"orders"`
	Locks  LockCounts   `json:"locks"` // summed over the instances' /metrics

	CleanShutdown bool     `json:"cleanShutdown"` // every instance exited 0 after SIGTERM
	Pass          bool     `json:"pass"`
	Failures      []string `json:"failures,omitempty"`
}

// DeductReport is phase 1.
type DeductReport struct {
	ProductID    int64          `json:"productId"`
	Requests     int            `json:"requests"`
	InitialStock int            `json:"initialStock"`
	Successes    int            `json:"successes"`
	Insufficient int            `json:"insufficientStock"`
	Busy         int            `json:"busy"`        // 503 busy, after the retries
	Unavailable  int            `json:"unavailable"` // 503 unavailable: Redis could not be reached
	Retries      int            `json:"retries"`     // requests sent again after a 503 with Retry-After
	Other        int            `json:"other"`
	OtherKinds   map[string]int `json:"otherKinds,omitempty"` // "500 internal", "transport error", ...
	FinalStock   int64          `json:"finalStock"`
	OrderRows    int64          `json:"orderRows"`
	OrderedItems int64          `json:"orderedItems"`
	Seconds      float64        `json:"seconds"`
	P50Ms        float64        `json:"p50Ms"`
	P99Ms        float64        `json:"p99Ms"`
	MaxMs        float64        `json:"maxMs"`
	Pass         bool           `json:"pass"`                   // safe: nothing oversold, no unexpected answer
	Failures     []string       `json:"failures,omitempty"`     // why not
	Availability []string       `json:"availability,omitempty"` // requests refused, not a failure
}

// OrdersReport is phase 2.
type OrdersReport struct {
	ProductID       int64          `json:"productId"`
	Requests        int            `json:"requests"`
	RequestNos      int            `json:"requestNos"`
	Duplicates      int            `json:"duplicates"`
	Created         int            `json:"created"`  // 201 without Idempotent-Replayed
	Replayed        int            `json:"replayed"` // 201 with Idempotent-Replayed
	InProgress      int            `json:"inProgress"`
	Busy            int            `json:"busy"`
	Unavailable     int            `json:"unavailable"`
	Retries         int            `json:"retries"`
	Other           int            `json:"other"`
	OtherKinds      map[string]int `json:"otherKinds,omitempty"`
	WithoutOrder    int            `json:"requestNosWithoutOrder"` // every attempt refused (availability)
	OrderRows       int            `json:"orderRows"`
	ExactlyOne      int            `json:"requestNosWithExactlyOneOrder"`
	MismatchedBody  int            `json:"mismatchedBodies"` // 201 bodies differing from the request number's first
	DuplicateOrders int            `json:"duplicateOrders"`  // order rows beyond one per request number
	Seconds         float64        `json:"seconds"`
	Pass            bool           `json:"pass"`
	Failures        []string       `json:"failures,omitempty"`
	Availability    []string       `json:"availability,omitempty"`
}

// LockCounts are the lock acquisitions the instances counted.
type LockCounts struct {
	Acquired    int64 `json:"acquired"`
	Busy        int64 `json:"busy"`
	Unavailable int64 `json:"unavailable"`
	Error       int64 `json:"error"`
}

// loadtestMain runs the loadtest subcommand.
func loadtestMain(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseLoadtestConfig(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, exitcode.Message("orderservice loadtest", err))
		return exitcode.CouldNotRun
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := RunLoadtest(ctx, cfg, stderr)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "orderservice loadtest: interrupted")
			return exitcode.Interrupted
		}
		fmt.Fprintln(stderr, exitcode.Message("orderservice loadtest", err))
		return exitcode.CouldNotRun
	}
	if cfg.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		rep.Print(stdout)
	}
	if cfg.NoLock {
		note := stdout
		if cfg.JSON {
			note = stderr // stdout holds the JSON
		}
		if rep.Pass {
			fmt.Fprintln(note, "note: --no-lock did not show the failure this time; raise -work-delay or -concurrency")
		} else {
			fmt.Fprintln(note, "note: this FAIL is the expected demonstration: --no-lock runs without the distributed lock and without the database guards. Run without --no-lock to see PASS.")
		}
	}
	if !rep.Pass {
		return exitcode.Fail
	}
	return exitcode.OK
}

// RunLoadtest runs a load test and returns its report. Progress lines go to
// progress (nil: none). An error means the test could not run; a failed
// check is a Report with Pass false.
func RunLoadtest(ctx context.Context, cfg LoadtestConfig, progress io.Writer) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if progress == nil {
		progress = io.Discard
	}
	runID := randomHex(4)
	rep := &Report{NoLock: cfg.NoLock, WorkDelay: cfg.WorkDelay.String(), LockWait: cfg.LockWait.String()}

	dir, err := os.MkdirTemp("", "orderservice-loadtest-")
	if err != nil {
		return nil, err
	}
	if cfg.Keep {
		rep.WorkDir = dir
	} else {
		defer os.RemoveAll(dir)
	}

	redisURL, closeRedis, err := loadtestRedis(cfg, rep)
	if err != nil {
		return nil, err
	}
	defer closeRedis()
	databaseURL, sqlitePath, closeDB, err := loadtestDatabase(ctx, cfg, dir, rep, progress)
	if err != nil {
		return nil, err
	}
	defer closeDB()

	fmt.Fprintf(progress, "starting %d instances (%s)...\n", cfg.Instances, rep.Database)
	fleet, err := startFleet(ctx, cfg, dir, "loadtest-"+runID, redisURL, databaseURL, sqlitePath)
	if err != nil {
		return nil, err
	}
	defer fleet.kill()
	for _, in := range fleet {
		rep.Instances = append(rep.Instances, in.addr)
	}

	store, err := OpenStore(ctx, databaseURL, sqlitePath)
	if err != nil {
		return nil, fmt.Errorf("opening the database to count orders: %w", err)
	}
	defer store.Close()
	lt := &loadtest{cfg: cfg, fleet: fleet, store: store, client: newLoadClient(cfg.Concurrency), progress: progress}
	defer lt.client.CloseIdleConnections()

	if rep.Deduct, err = lt.deductPhase(ctx); err != nil {
		return nil, err
	}
	if rep.Orders, err = lt.ordersPhase(ctx, "lt-"+runID+"-"); err != nil {
		return nil, err
	}
	rep.Locks = lt.lockCounts(ctx)

	fmt.Fprintf(progress, "stopping the instances (SIGTERM)...\n")
	stopErr := fleet.stop(30 * time.Second)
	rep.CleanShutdown = stopErr == nil

	rep.Pass = rep.Deduct.Pass && rep.Orders.Pass && rep.CleanShutdown
	if !rep.CleanShutdown {
		rep.Failures = append(rep.Failures, "instances did not shut down cleanly: "+strings.ReplaceAll(stopErr.Error(), "\n", "; "))
	}
	return rep, nil
}

// loadtestRedis returns the Redis URL to use: REDIS_URL, or a private
// redis-server's.
func loadtestRedis(cfg LoadtestConfig, rep *Report) (url string, closeFn func(), err error) {
	if cfg.RedisURL != "" {
		rep.Redis = EnvRedisURL + " " + RedactURL(cfg.RedisURL)
		return cfg.RedisURL, func() {}, nil
	}
	srv, err := redisserver.Start(redisserver.Options{})
	if errors.Is(err, redisserver.ErrNotFound) {
		return "", nil, fmt.Errorf("%w (install redis-server, for example with scripts/setup.sh, or set %s)", err, EnvRedisURL)
	}
	if err != nil {
		return "", nil, err
	}
	rep.Redis = "private redis-server " + srv.Addr()
	return "redis://" + srv.Addr() + "/0", func() { srv.Close() }, nil
}

// loadtestDatabase picks the database: PostgreSQL (DATABASE_URL or a
// private server) or a SQLite file in dir, created and migrated here.
func loadtestDatabase(ctx context.Context, cfg LoadtestConfig, dir string, rep *Report, progress io.Writer) (databaseURL, sqlitePath string, closeFn func(), err error) {
	sqlite := func() (string, string, func(), error) {
		rep.Database = "sqlite"
		path := filepath.Join(dir, "orders.db")
		rep.Store = "SQLite file " + path + " (WAL)"
		if err := prepareSQLite(ctx, path); err != nil {
			return "", "", nil, err
		}
		return "", path, func() {}, nil
	}
	if cfg.DB == "sqlite" {
		return sqlite()
	}
	if cfg.DatabaseURL != "" {
		rep.Database = "postgres"
		rep.Store = EnvDatabaseURL + " " + RedactURL(cfg.DatabaseURL)
		return cfg.DatabaseURL, "", func() {}, nil
	}
	fmt.Fprintf(progress, "starting a private PostgreSQL...\n")
	srv, err := pgserver.Start(pgserver.Options{})
	if errors.Is(err, pgserver.ErrNotFound) && cfg.DB == "auto" {
		fmt.Fprintf(progress, "PostgreSQL not found (%v); using SQLite\n", err)
		return sqlite()
	}
	if err != nil {
		return "", "", nil, err
	}
	rep.Database = "postgres"
	rep.Store = "private PostgreSQL " + srv.Addr()
	return srv.URL(), "", func() { srv.Close() }, nil
}

// prepareSQLite creates the SQLite file at path in WAL mode and migrates it,
// before the instances start. Instances that open a new file together all
// switch it to WAL mode at once, which SQLite can refuse with SQLITE_BUSY
// without waiting; OpenStore retries that, but the load test need not
// depend on it. WAL mode is kept in the file, so the instances only read it.
func prepareSQLite(ctx context.Context, path string) error {
	s, err := OpenStore(ctx, "", path)
	if err != nil {
		return fmt.Errorf("creating the SQLite file: %w", err)
	}
	defer s.Close()
	var mode string
	if err := s.db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return fmt.Errorf("reading the journal mode of %s: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("SQLite file %s is in journal mode %q, want wal (is WAL supported on this file system?)", path, mode)
	}
	if _, err := s.Migrate(ctx); err != nil {
		return fmt.Errorf("migrating the SQLite file: %w", err)
	}
	return s.Close()
}

// instance is one service process.
type instance struct {
	n       int
	addr    string // host:port it listens on
	logPath string
	cmd     *exec.Cmd
	exited  <-chan struct{}
	wait    func() error
}

// fleet is the instances of a load test.
type fleet []*instance

// startFleet starts cfg.Instances instances at once and waits until each
// listens. On a PostgreSQL database they race to migrate it (a SQLite file
// was migrated beforehand: see prepareSQLite).
func startFleet(ctx context.Context, cfg LoadtestConfig, dir, namespace, redisURL, databaseURL, sqlitePath string) (fleet, error) {
	exe := cfg.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding this binary to start it as instances: %w", err)
		}
	}
	args := []string{"serve", "-listen", "127.0.0.1:0", "-namespace", namespace,
		"-work-delay", cfg.WorkDelay.String(), "-lock-wait", cfg.LockWait.String()}
	if sqlitePath != "" {
		args = append(args, "-sqlite", sqlitePath)
	}
	if cfg.NoLock {
		args = append(args, "-no-lock")
	}
	env := []string{EnvChild + "=1", EnvRedisURL + "=" + redisURL} // URLs go by environment, not argv
	if databaseURL != "" {
		env = append(env, EnvDatabaseURL+"="+databaseURL)
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name != EnvRedisURL && name != EnvDatabaseURL && name != EnvListen && name != EnvChild {
			env = append(env, kv)
		}
	}

	f := make(fleet, cfg.Instances)
	errs := make([]error, cfg.Instances)
	var wg sync.WaitGroup
	for i := range f {
		wg.Go(func() { f[i], errs[i] = startInstance(ctx, i, exe, args, env, dir) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		f.kill()
		return nil, err
	}
	return f, nil
}

// startInstance starts one instance, its output going to a log file in dir,
// and waits for its "listening" log line.
func startInstance(ctx context.Context, n int, exe string, args, env []string, dir string) (*instance, error) {
	in := &instance{n: n, logPath: filepath.Join(dir, fmt.Sprintf("instance-%d.log", n))}
	logFile, err := os.Create(in.logPath)
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	in.cmd = exec.Command(exe, args...)
	in.cmd.Env = env
	in.cmd.Stdout, in.cmd.Stderr = pw, pw
	in.exited, in.wait, err = startChild(in.cmd)
	pw.Close() // the child has its copy
	if err != nil {
		pr.Close()
		logFile.Close()
		return nil, fmt.Errorf("starting instance %d: %w", n, err)
	}

	listening := make(chan string, 1)
	copied := make(chan struct{}) // closed when the whole output is in the log file
	go func() {                   // copy the output to the log file, spotting the listening line
		defer close(copied)
		defer logFile.Close()
		defer pr.Close()
		r := bufio.NewReader(pr)
		for {
			line, err := r.ReadBytes('\n')
			logFile.Write(line)
			if bytes.Contains(line, []byte(`"msg":"listening"`)) {
				var l struct{ Addr string }
				if json.Unmarshal(line, &l) == nil && l.Addr != "" {
					select {
					case listening <- l.Addr:
					default:
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()

	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	select {
	case in.addr = <-listening:
		return in, nil
	case <-in.exited:
		err = fmt.Errorf("instance %d exited during startup (%v)", n, in.wait())
	case <-timer.C:
		err = fmt.Errorf("instance %d not listening after a minute", n)
	case <-ctx.Done():
		err = fmt.Errorf("instance %d: %w", n, context.Cause(ctx))
	}
	in.kill()
	select { // the pipe ends with the process: wait for its last lines
	case <-copied:
	case <-time.After(5 * time.Second):
	}
	log, _ := os.ReadFile(in.logPath)
	return nil, fmt.Errorf("%w; its last log line: %s", err, lastLine(string(log)))
}

// lastLine returns the last non-empty line of s, cut to 300 bytes: what an
// instance said before it exited, for a one-line error.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	line := strings.TrimSpace(lines[len(lines)-1])
	if line == "" {
		return "(none)"
	}
	if len(line) > 300 {
		line = line[:300] + "…"
	}
	return line
}

// kill kills the instance and waits for it.
func (in *instance) kill() {
	in.cmd.Process.Kill()
	in.wait()
}

// kill kills every instance still running.
func (f fleet) kill() {
	for _, in := range f {
		if in != nil {
			in.kill()
		}
	}
}

// stop sends SIGTERM to every instance and waits up to timeout for each to
// exit; an instance still running then is killed. It returns an error
// unless every instance exited with status 0.
func (f fleet) stop(timeout time.Duration) error {
	for _, in := range f {
		in.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var errs []error
	for _, in := range f {
		select {
		case <-in.exited:
		case <-deadline.C:
			in.cmd.Process.Kill()
			errs = append(errs, fmt.Errorf("instance %d did not exit within %v of SIGTERM", in.n, timeout))
		}
		if err := in.wait(); err != nil {
			errs = append(errs, fmt.Errorf("instance %d: %v (log: %s)", in.n, err, in.logPath))
		}
	}
	return errors.Join(errs...)
}

// newLoadClient returns an HTTP client that keeps connections alive for
// concurrency requests in flight.
func newLoadClient(concurrency int) *http.Client {
	return &http.Client{
		Timeout: 2 * time.Minute,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        2 * concurrency,
			MaxIdleConnsPerHost: concurrency,
			IdleConnTimeout:     90 * time.Second,
		},
	}
}

// loadtest is a running load test.
type loadtest struct {
	cfg      LoadtestConfig
	fleet    fleet
	store    *Store
	client   *http.Client
	progress io.Writer
}

// response is what a request got.
type response struct {
	status     int
	code       string // the error code of a JSON error body
	body       []byte
	replayed   bool
	took       time.Duration
	err        error         // transport error
	retryAfter time.Duration // from Retry-After (seconds); -1 when absent
}

// kind names a response for the "other" tallies.
func (r response) kind() string {
	if r.err != nil {
		return "transport error"
	}
	return strings.TrimSpace(strconv.Itoa(r.status) + " " + r.code)
}

// do sends a request to instance in and reads the whole response.
func (lt *loadtest) do(ctx context.Context, in *instance, method, path string, body []byte) response {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+in.addr+path, bytes.NewReader(body))
	if err != nil {
		return response{err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := lt.client.Do(req)
	if err != nil {
		return response{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, body: b, replayed: resp.Header.Get(HeaderReplayed) == "true", took: time.Since(start), err: err,
		retryAfter: -1}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs >= 0 {
		r.retryAfter = time.Duration(secs) * time.Second
	}
	if resp.StatusCode >= 400 {
		var e APIError
		if json.Unmarshal(b, &e) == nil {
			r.code = e.Code
		}
	}
	return r
}

// maxRetryAfter bounds the wait a Retry-After may ask for.
const maxRetryAfter = 10 * time.Second

// doRetry is do, retrying a 503 that carries Retry-After (a busy lock, an
// outage) after the seconds it names, up to cfg.Retries times, as a
// well-behaved client does. It returns the last response and how many
// times the request was sent again.
func (lt *loadtest) doRetry(ctx context.Context, in *instance, method, path string, body []byte) (response, int) {
	for retries := 0; ; retries++ {
		r := lt.do(ctx, in, method, path, body)
		if r.err != nil || r.status != http.StatusServiceUnavailable || r.retryAfter < 0 || retries >= lt.cfg.Retries {
			return r, retries
		}
		if sleep(ctx, min(r.retryAfter, maxRetryAfter)) != nil {
			return r, retries
		}
	}
}

// createProduct creates a product through instance 0.
func (lt *loadtest) createProduct(ctx context.Context, name string, stock int) (Product, error) {
	body, _ := json.Marshal(map[string]any{"name": name, "stock": stock})
	r := lt.do(ctx, lt.fleet[0], http.MethodPost, "/api/products", body)
	if r.err != nil || r.status != http.StatusCreated {
		return Product{}, fmt.Errorf("creating a product: %s %s", r.kind(), r.body)
	}
	var p Product
	return p, json.Unmarshal(r.body, &p)
}

// deductPhase is phase 1.
func (lt *loadtest) deductPhase(ctx context.Context) (DeductReport, error) {
	cfg := lt.cfg
	rep := DeductReport{Requests: cfg.Requests, InitialStock: cfg.Stock, OtherKinds: map[string]int{}}
	p, err := lt.createProduct(ctx, "loadtest deduct", cfg.Stock)
	if err != nil {
		return rep, err
	}
	rep.ProductID = p.ID

	var mu sync.Mutex
	var took []time.Duration
	var ok, insufficient, busy, unavailable, other, retries atomic.Int64
	stop := startProgress(lt.progress, "phase 1 deduct", cfg.Requests, func() string {
		return fmt.Sprintf("ok %d, insufficient %d, busy %d, unavailable %d, other %d, retries %d",
			ok.Load(), insufficient.Load(), busy.Load(), unavailable.Load(), other.Load(), retries.Load())
	}, func() int64 { return ok.Load() + insufficient.Load() + busy.Load() + unavailable.Load() + other.Load() })
	path := fmt.Sprintf("/api/stock/%d/deduct?count=1", p.ID)
	start := time.Now()
	fire(ctx, cfg.Requests, cfg.Concurrency, func(i int) {
		r, n := lt.doRetry(ctx, lt.fleet[i%len(lt.fleet)], http.MethodPost, path, nil)
		retries.Add(int64(n))
		mu.Lock()
		defer mu.Unlock()
		took = append(took, r.took)
		switch {
		case r.err == nil && r.status == http.StatusOK:
			ok.Add(1)
		case r.status == http.StatusConflict && r.code == CodeInsufficientStock:
			insufficient.Add(1)
		case r.status == http.StatusServiceUnavailable && r.code == CodeBusy:
			busy.Add(1)
		case r.status == http.StatusServiceUnavailable && r.code == CodeUnavailable:
			unavailable.Add(1)
		default:
			other.Add(1)
			rep.OtherKinds[r.kind()]++
		}
	})
	rep.Seconds = time.Since(start).Seconds()
	stop()
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	rep.Successes, rep.Insufficient, rep.Busy, rep.Unavailable, rep.Other, rep.Retries =
		int(ok.Load()), int(insufficient.Load()), int(busy.Load()), int(unavailable.Load()), int(other.Load()), int(retries.Load())
	rep.P50Ms, rep.P99Ms, rep.MaxMs = percentileMs(took, 50), percentileMs(took, 99), percentileMs(took, 100)

	r := lt.do(ctx, lt.fleet[1%len(lt.fleet)], http.MethodGet, fmt.Sprintf("/api/products/%d", p.ID), nil)
	var final Product
	if r.err != nil || r.status != http.StatusOK || json.Unmarshal(r.body, &final) != nil {
		return rep, fmt.Errorf("reading the final stock: %s %s", r.kind(), r.body)
	}
	rep.FinalStock = final.Stock
	if rep.OrderRows, rep.OrderedItems, err = lt.store.OrderStats(ctx, p.ID); err != nil {
		return rep, fmt.Errorf("counting orders: %w", err)
	}

	// Safety: every success is one order of one item out of the stock, and
	// no more were sold than there was.
	fail := func(format string, args ...any) { rep.Failures = append(rep.Failures, fmt.Sprintf(format, args...)) }
	if rep.Successes > cfg.Stock {
		fail("oversold: %d deductions succeeded, stock was %d", rep.Successes, cfg.Stock)
	}
	if rep.FinalStock != int64(cfg.Stock-rep.Successes) || rep.FinalStock < 0 {
		fail("final stock %d, want %d (stock %d - %d successes)", rep.FinalStock, cfg.Stock-rep.Successes, cfg.Stock, rep.Successes)
	}
	if rep.OrderRows != int64(rep.Successes) || rep.OrderedItems != int64(rep.Successes) {
		fail("%d order rows (%d items) for %d successes", rep.OrderRows, rep.OrderedItems, rep.Successes)
	}
	if rep.Insufficient > 0 && rep.FinalStock > 0 {
		fail("%d requests were told insufficient stock while %d items remained", rep.Insufficient, rep.FinalStock)
	}
	if rep.Other > 0 {
		fail("%d unexpected responses: %v", rep.Other, rep.OtherKinds)
	}
	rep.Pass = len(rep.Failures) == 0

	// Availability: requests refused after their retries.
	if rep.Busy > 0 {
		rep.Availability = append(rep.Availability, fmt.Sprintf(
			"%d requests still 503 busy after up to %d retries: the lock wait (%v) is short for this load; nothing was oversold",
			rep.Busy, cfg.Retries, cfg.LockWait))
	}
	if rep.Unavailable > 0 {
		rep.Availability = append(rep.Availability, fmt.Sprintf("%d requests 503 unavailable: Redis could not be reached", rep.Unavailable))
	}
	return rep, nil
}

// ordersPhase is phase 2: RequestNos × Duplicates POST /api/orders for one
// item each. The duplicates of a request number go to different instances
// and are in flight together.
func (lt *loadtest) ordersPhase(ctx context.Context, prefix string) (OrdersReport, error) {
	cfg := lt.cfg
	total := cfg.RequestNos * cfg.Duplicates
	rep := OrdersReport{Requests: total, RequestNos: cfg.RequestNos, Duplicates: cfg.Duplicates, OtherKinds: map[string]int{}}
	p, err := lt.createProduct(ctx, "loadtest orders", total)
	if err != nil {
		return rep, err
	}
	rep.ProductID = p.ID

	type job struct{ no, instance int }
	jobs := make([]job, 0, total)
	for d := range cfg.Duplicates {
		for no := range cfg.RequestNos {
			jobs = append(jobs, job{no, (no + d) % len(lt.fleet)})
		}
	}
	requestNo := func(no int) string { return fmt.Sprintf("%s%04d", prefix, no) }

	results := make([]response, total)
	var finished, retried atomic.Int64
	stop := startProgress(lt.progress, "phase 2 orders", total, func() string { return "" }, finished.Load)
	start := time.Now()
	fire(ctx, total, cfg.Concurrency, func(i int) {
		j := jobs[i]
		body, _ := json.Marshal(CreateOrderRequest{RequestNo: requestNo(j.no), ProductID: p.ID, Count: 1})
		var n int
		results[i], n = lt.doRetry(ctx, lt.fleet[j.instance], http.MethodPost, "/api/orders", body)
		retried.Add(int64(n))
		finished.Add(1)
	})
	rep.Seconds = time.Since(start).Seconds()
	rep.Retries = int(retried.Load())
	stop()
	if err := ctx.Err(); err != nil {
		return rep, err
	}

	// Every 201 of a request number must carry the same body: that of the
	// response that created the order (or, if none did, the first replay).
	first := make([][]byte, cfg.RequestNos)
	for i, r := range results {
		if r.err == nil && r.status == http.StatusCreated && !r.replayed && first[jobs[i].no] == nil {
			first[jobs[i].no] = r.body
		}
	}
	for i, r := range results {
		no := jobs[i].no
		switch {
		case r.err == nil && r.status == http.StatusCreated:
			if r.replayed {
				rep.Replayed++
			} else {
				rep.Created++
			}
			if first[no] == nil {
				first[no] = r.body
			}
			if !bytes.Equal(first[no], r.body) {
				rep.MismatchedBody++
			}
		case r.status == http.StatusConflict && r.code == CodeInProgress:
			rep.InProgress++
		case r.status == http.StatusServiceUnavailable && r.code == CodeBusy:
			rep.Busy++
		case r.status == http.StatusServiceUnavailable && r.code == CodeUnavailable:
			rep.Unavailable++
		default:
			rep.Other++
			rep.OtherKinds[r.kind()]++
		}
	}

	counts, err := lt.store.OrdersByRequestNo(ctx, prefix)
	if err != nil {
		return rep, fmt.Errorf("counting orders: %w", err)
	}
	succeeded := make(map[string]bool) // request numbers with a 201
	for i, r := range results {
		if r.err == nil && r.status == http.StatusCreated {
			succeeded[requestNo(jobs[i].no)] = true
		}
	}
	lost := 0 // a 201 without an order row
	for no := range succeeded {
		if counts[no] == 0 {
			lost++
		}
	}
	for _, n := range counts {
		rep.OrderRows += n
		if n == 1 {
			rep.ExactlyOne++
		}
		if n > 1 {
			rep.DuplicateOrders += n - 1
		}
	}
	rep.WithoutOrder = cfg.RequestNos - len(counts)

	// Safety: one order per request number at most, every success of a
	// request number the same body, and behind every success an order.
	fail := func(format string, args ...any) { rep.Failures = append(rep.Failures, fmt.Sprintf(format, args...)) }
	if rep.DuplicateOrders > 0 {
		fail("%d duplicate orders: %d order rows for %d request numbers", rep.DuplicateOrders, rep.OrderRows, len(counts))
	}
	if rep.MismatchedBody > 0 {
		fail("%d successful responses differ from the first response of their request number", rep.MismatchedBody)
	}
	if lost > 0 {
		fail("%d request numbers were answered 201 but have no order", lost)
	}
	if rep.Other > 0 {
		fail("%d unexpected responses: %v", rep.Other, rep.OtherKinds)
	}
	rep.Pass = len(rep.Failures) == 0

	if rep.Busy > 0 || rep.Unavailable > 0 {
		rep.Availability = append(rep.Availability, fmt.Sprintf(
			"%d requests refused after up to %d retries (busy %d: the lock wait %v is short for this load; unavailable %d: Redis could not be reached)",
			rep.Busy+rep.Unavailable, cfg.Retries, rep.Busy, cfg.LockWait, rep.Unavailable))
	}
	if rep.WithoutOrder > 0 {
		rep.Availability = append(rep.Availability, fmt.Sprintf(
			"%d of %d request numbers got no order: every attempt was refused; a client retrying later would create it once", rep.WithoutOrder, cfg.RequestNos))
	}
	return rep, nil
}

// lockCounts sums orderservice_lock_acquire_total over the instances.
func (lt *loadtest) lockCounts(ctx context.Context) LockCounts {
	var c LockCounts
	for _, in := range lt.fleet {
		r := lt.do(ctx, in, http.MethodGet, "/metrics", nil)
		if r.err != nil || r.status != http.StatusOK {
			continue
		}
		for line := range strings.Lines(string(r.body)) {
			rest, ok := strings.CutPrefix(line, "orderservice_lock_acquire_total{outcome=")
			if !ok {
				continue
			}
			label, value, _ := strings.Cut(rest, "} ")
			n, _ := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
			switch label {
			case `"acquired"`:
				c.Acquired += n
			case `"busy"`:
				c.Busy += n
			case `"unavailable"`:
				c.Unavailable += n
			case `"error"`:
				c.Error += n
			}
		}
	}
	return c
}

// fire calls do(i) for i in [0, n) on concurrency goroutines, stopping
// early when ctx is done.
func fire(ctx context.Context, n, concurrency int, do func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, concurrency) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				do(i)
			}
		})
	}
	wg.Wait()
}

// startProgress prints a progress line to w until the returned stop is
// called: rewritten in place on a terminal, every 2 s otherwise.
func startProgress(w io.Writer, label string, total int, detail func() string, done func() int64) (stop func()) {
	if w == io.Discard {
		return func() {}
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil {
			tty = fi.Mode()&os.ModeCharDevice != 0
		}
	}
	every := 2 * time.Second
	if tty {
		every = 200 * time.Millisecond
	}
	start := time.Now()
	line := func() string {
		s := fmt.Sprintf("%s: %d/%d done in %.1fs", label, done(), total, time.Since(start).Seconds())
		if d := detail(); d != "" {
			s += " (" + d + ")"
		}
		return s
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				if tty {
					fmt.Fprintf(w, "\r\033[K%s\n", line())
				} else {
					fmt.Fprintln(w, line())
				}
				return
			case <-t.C:
				if tty {
					fmt.Fprintf(w, "\r\033[K%s", line())
				} else {
					fmt.Fprintln(w, line())
				}
			}
		}
	})
	return func() { close(quit); wg.Wait() }
}

// percentileMs returns the p-th percentile of ds in milliseconds.
func percentileMs(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	i = max(1, min(i, len(s)))
	return float64(s[i-1].Microseconds()) / 1000
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Print writes the report for people.
func (r *Report) Print(w io.Writer) {
	mode := "fencelock: per-product lock, fencing tokens, idempotency guard"
	if r.NoLock {
		mode = "--no-lock: NO lock and NO database guards (a demonstration of the failure)"
	}
	fmt.Fprintf(w, "orderservice loadtest\n")
	fmt.Fprintf(w, "  instances  %d: %s\n", len(r.Instances), strings.Join(r.Instances, ", "))
	fmt.Fprintf(w, "  redis      %s\n", r.Redis)
	fmt.Fprintf(w, "  database   %s: %s\n", r.Database, r.Store)
	fmt.Fprintf(w, "  mode       %s; lock wait %s, work delay %s\n", mode, r.LockWait, r.WorkDelay)
	if r.WorkDir != "" {
		fmt.Fprintf(w, "  work dir   %s (instance logs kept)\n", r.WorkDir)
	}

	d := r.Deduct
	fmt.Fprintf(w, "\nphase 1: stock deduction: %d concurrent requests for 1 item, stock %d\n", d.Requests, d.InitialStock)
	fmt.Fprintf(w, "  successes (200)            %6d\n", d.Successes)
	fmt.Fprintf(w, "  insufficient stock (409)   %6d\n", d.Insufficient)
	fmt.Fprintf(w, "  busy (503)                 %6d\n", d.Busy)
	fmt.Fprintf(w, "  unavailable (503)          %6d\n", d.Unavailable)
	fmt.Fprintf(w, "  other                      %6d%s\n", d.Other, kinds(d.OtherKinds))
	fmt.Fprintf(w, "  retries after Retry-After  %6d\n", d.Retries)
	fmt.Fprintf(w, "  final stock                %6d\n", d.FinalStock)
	fmt.Fprintf(w, "  order rows                 %6d  (%d items)\n", d.OrderRows, d.OrderedItems)
	fmt.Fprintf(w, "  elapsed                    %6.2fs (%.0f req/s; latency p50 %.1fms, p99 %.1fms, max %.1fms)\n",
		d.Seconds, float64(d.Requests)/max(d.Seconds, 1e-9), d.P50Ms, d.P99Ms, d.MaxMs)
	printVerdict(w, d.Pass, d.Failures, d.Availability)

	o := r.Orders
	fmt.Fprintf(w, "\nphase 2: idempotent orders: %d concurrent requests, %d request numbers x %d\n", o.Requests, o.RequestNos, o.Duplicates)
	fmt.Fprintf(w, "  created (201)              %6d\n", o.Created)
	fmt.Fprintf(w, "  replayed (201, replayed)   %6d\n", o.Replayed)
	fmt.Fprintf(w, "  in progress (409)          %6d\n", o.InProgress)
	fmt.Fprintf(w, "  busy (503)                 %6d\n", o.Busy)
	fmt.Fprintf(w, "  unavailable (503)          %6d\n", o.Unavailable)
	fmt.Fprintf(w, "  other                      %6d%s\n", o.Other, kinds(o.OtherKinds))
	fmt.Fprintf(w, "  retries after Retry-After  %6d\n", o.Retries)
	fmt.Fprintf(w, "  order rows                 %6d  (%d of %d request numbers with exactly one, %d with none; %d duplicate orders)\n",
		o.OrderRows, o.ExactlyOne, o.RequestNos, o.WithoutOrder, o.DuplicateOrders)
	fmt.Fprintf(w, "  bodies differing from the first %d\n", o.MismatchedBody)
	fmt.Fprintf(w, "  elapsed                    %6.2fs\n", o.Seconds)
	printVerdict(w, o.Pass, o.Failures, o.Availability)

	fmt.Fprintf(w, "\nlock acquisitions (all instances): acquired %d, busy %d, unavailable %d, error %d\n",
		r.Locks.Acquired, r.Locks.Busy, r.Locks.Unavailable, r.Locks.Error)
	fmt.Fprintf(w, "instances stopped cleanly on SIGTERM: %v\n", r.CleanShutdown)
	for _, f := range r.Failures {
		fmt.Fprintf(w, "  - %s\n", f)
	}
	if r.Pass {
		fmt.Fprintf(w, "\nRESULT: PASS\n")
	} else {
		fmt.Fprintf(w, "\nRESULT: FAIL\n")
	}
}

// printVerdict prints a phase's safety verdict, then what it could not
// serve (availability: reported, never a FAIL).
func printVerdict(w io.Writer, pass bool, failures, availability []string) {
	if pass {
		fmt.Fprintf(w, "  safety: PASS\n")
	} else {
		fmt.Fprintf(w, "  safety: FAIL\n")
		for _, f := range failures {
			fmt.Fprintf(w, "  - %s\n", f)
		}
	}
	if len(availability) == 0 {
		fmt.Fprintf(w, "  availability: every request served\n")
	}
	for _, a := range availability {
		fmt.Fprintf(w, "  availability (not a failure): %s\n", a)
	}
}

func kinds(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return "  (" + strings.Join(parts, ", ") + ")"
}
