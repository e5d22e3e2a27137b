package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// WorkerMain is the body of a worker process: it reads its configuration
// from $FENCELOCK_DEMO_WORKER, waits for "go" on stdin, runs its
// iterations, reporting each on stdout as a JSON line, and returns the
// process's exit code. It stops early when stdin closes (the master is gone)
// or on SIGINT/SIGTERM.
//
// backends are the Backends beyond the built-in ones that a master may
// have put the lock on (Config.Backend).
func WorkerMain(backends ...*Backend) int {
	raw := os.Getenv(WorkerEnv)
	if raw == "" {
		fmt.Fprintln(os.Stderr, "fencelock demo-worker: not meant to be run by hand: \"fencelock demo\" starts it (with $"+WorkerEnv+" set)")
		return 2
	}
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "fencelock demo-worker: bad $%s: %v\n", WorkerEnv, err)
		return 2
	}
	if !cfg.Verbose {
		QuietRedisLog() // dial errors during the restart are expected
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := &emitter{enc: json.NewEncoder(os.Stdout)}
	if err := runWorker(ctx, cfg, os.Stdin, out, backends); err != nil {
		out.emit(event{Ev: "fatal", Err: err.Error()})
		fmt.Fprintf(os.Stderr, "fencelock demo-worker %d: %v\n", cfg.ID, err)
		return 1
	}
	return 0
}

// emitter writes events as JSON lines, one Write each.
type emitter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (e *emitter) emit(ev event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.enc.Encode(ev) // the master is gone if this fails; stdin's EOF ends us
}

// worker is one worker process's state.
type worker struct {
	cfg    workerConfig
	pid    int
	rdb    *redis.Client // the demo's Redis: the referee's keys (and the lock, outside the failover scenarios)
	locks  *fencelock.Client
	store  fence.Store
	keys   demoKeys
	out    *emitter
	keyArg []string

	stop     <-chan struct{} // closed on "stop": finish the iteration under way, then end
	releases <-chan int64    // "release FENCE": the master lets its failover victim go

	// The fair scenario runs several goroutines per process, each with a
	// copy of the worker (cfg.ID: the goroutine's number; see fair_worker.go).
	fair  bool // acquire WithFairness
	quiet bool // report whole iterations only, no steps: they are thousands of short ones
}

func runWorker(ctx context.Context, cfg workerConfig, stdin io.Reader, out *emitter, backends []*Backend) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	opt, err := parseRedisURL(cfg.RedisURL)
	if err != nil {
		return err
	}
	// Short timeouts: when the master kills redis-server, calls fail fast
	// and the worker retries instead of hanging.
	opt.DialTimeout = time.Second
	opt.ReadTimeout = 2 * time.Second
	opt.WriteTimeout = 2 * time.Second
	opt.PoolSize = 8
	rdb := redis.NewClient(opt)
	defer rdb.Close()

	logger := slog.New(slog.DiscardHandler)
	if cfg.Verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	// The lock's Redis: the demo's own, or (failover scenarios) a Sentinel
	// group or a Cluster, through a go-redis client with its default
	// options, as an application would have it.
	var lockRDB redis.UniversalClient = rdb
	var lockBackend driver.Store // a Backend's, for backendLock
	switch cfg.Lock.Kind {
	case "":
	case backendLock:
		b := lookupBackend(cfg.Lock.Backend, backends)
		if b == nil {
			return fmt.Errorf("unknown backend %q (this program cannot reach it)", cfg.Lock.Backend)
		}
		lb, closeFn, err := b.NewWorker(cfg.Lock.Config)
		if err != nil {
			return fmt.Errorf("%s backend: %w", b.Name, err)
		}
		defer closeFn()
		lockBackend = lb
	case lockSentinel:
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: cfg.Lock.MasterName, SentinelAddrs: cfg.Lock.Addrs})
		defer c.Close()
		lockRDB = c
	case lockCluster:
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.Lock.Addrs})
		defer c.Close()
		lockRDB = c
	default:
		return fmt.Errorf("unknown lock kind %q", cfg.Lock.Kind)
	}
	var bopts []redisbackend.Option
	if cfg.Lock.ReplicaAck > 0 {
		bopts = append(bopts, redisbackend.WithReplicaAck(cfg.Lock.ReplicaAck, cfg.Lock.ReplicaAckTimeout))
	}
	copts := []fencelock.Option{fencelock.WithNamespace(cfg.Namespace), fencelock.WithLogger(logger)}
	if cfg.Fair != nil || cfg.Prim != nil {
		// Tokens that name the process, so that the master can tell whose
		// waiters stand in the line (whose permits are held) on the server.
		copts = append(copts, fencelock.WithTokenGenerator(fairTokens(cfg.ID)))
	}
	if lockBackend == nil {
		lockBackend = redisbackend.New(lockRDB, bopts...)
	}
	locks := fencelock.New(lockBackend, copts...)
	defer locks.Close()

	store, err := openStore(ctx, cfg.Store, rdb, false)
	if err != nil {
		return err
	}
	defer store.close()

	stop := make(chan struct{})
	releases := make(chan int64, 4)
	w := &worker{
		cfg: cfg, pid: os.Getpid(), rdb: rdb, locks: locks, store: store, out: out,
		keys: keysFor(cfg.Namespace, cfg.Key), stop: stop, releases: releases,
	}
	w.keyArg = []string{w.keys.inside, w.keys.holder, w.keys.epoch, w.keys.want, w.keys.victim}
	if cfg.Fair != nil {
		return w.runFair(ctx, stdin)
	}
	if cfg.Prim != nil {
		return w.runPrim(ctx, stdin)
	}

	// stdin: "go" starts the run; "stop" ends it after the iteration under
	// way; "release FENCE" ends the hold of the failover victim with that
	// fence; EOF (the master exited or gave up on us) ends it at once.
	start := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdin)
		started, stopped := false, false
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == "go" && !started:
				started = true
				close(start)
			case len(f) == 1 && f[0] == "stop" && !stopped:
				stopped = true
				close(stop)
			case len(f) == 2 && f[0] == "release":
				if fence, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					select {
					case releases <- fence:
					default: // nobody is listening: stale ones are dropped
					}
				}
			}
		}
		cancel()
	}()
	out.emit(event{Ev: "ready", Pid: w.pid})
	select {
	case <-start:
	case <-ctx.Done():
		return nil
	}

	for i := 0; (cfg.UntilStopped || i < cfg.Iterations) && ctx.Err() == nil; i++ {
		if w.stopped() {
			break
		}
		rec := w.iteration(ctx, i)
		if ctx.Err() != nil && rec.Outcome != outcomeCompleted {
			break // stopping: do not report what the stop cut short
		}
		out.emit(event{Ev: "iter", Iter: rec})
	}
	if ctx.Err() == nil {
		out.emit(event{Ev: "done"})
	}
	return nil
}

// stopped reports whether the master said "stop".
func (w *worker) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// iteration runs one acquire, enter, write, hold, write, exit, release.
func (w *worker) iteration(ctx context.Context, i int) *iterRecord {
	rec := &iterRecord{Worker: w.cfg.ID, Iter: i, AcquireStart: mono()}
	var opts []fencelock.AcquireOption
	if w.cfg.Renew > 0 {
		opts = append(opts, fencelock.WithAutoRenew(w.cfg.Renew))
	}
	if w.cfg.MaxWait > 0 {
		opts = append(opts, fencelock.WithWait(w.cfg.MaxWait))
	}
	if w.fair {
		opts = append(opts, fencelock.WithFairness())
	}
	// Acquire waits, and keeps trying through connection errors (a Redis
	// restart) until the wait bound.
	lk, err := w.locks.Acquire(ctx, w.cfg.Key, w.cfg.Lease, opts...)
	if err != nil {
		rec.Outcome, rec.Err = outcomeFailed, "acquire: "+err.Error()
		return rec
	}
	// The hold interval starts here and ends just before Release, both
	// stamped with CLOCK_MONOTONIC, which is system-wide: the master
	// compares intervals from all workers to find overlaps, independently of
	// the counter below.
	rec.Acquired = mono()
	rec.Fence = lk.Fence()
	stopStallWatch := watchStalls(rec)
	holder := holderValue{Pid: w.pid, Worker: w.cfg.ID, Fence: rec.Fence}.String()

	// When was the holder told? Stamp the moment Done closes, as an
	// application waiting on it would see it.
	var doneAt atomic.Int64
	stamped := make(chan struct{})
	go func() {
		defer close(stamped)
		<-lk.Done()
		doneAt.Store(mono())
	}()

	release := func() {
		rec.LostBeforeRelease = errors.Is(lk.Err(), fencelock.ErrLost)
		if rec.Exited == 0 {
			rec.Exited = mono()
		}
		stopStallWatch()
		if rec.LostBeforeRelease {
			<-lk.Done() // closed by the loss (Err reports it)
			<-stamped
			rec.ToldAt, rec.LostErr = doneAt.Load(), lk.Err().Error()
		}
		rec.ReleaseStart = mono()
		rerr := lk.Release(ctx)
		rec.ReleaseEnd = mono()
		rec.Released = rerr == nil
		if rerr != nil {
			rec.ReleaseErr = rerr.Error()
			rec.ReleaseUnconfirmed = errors.Is(rerr, fencelock.ErrUnavailable)
		}
		rec.LostAtEnd = errors.Is(lk.Err(), fencelock.ErrLost)
	}

	// Enter: INCR the shared counter (must return 1) and publish who is
	// inside, atomically; refused while Redis is between epochs. The
	// worker may become the master's failover victim here.
	n, epoch, victim, err := triple(ctx, w.rdb, enterScript, 3, w.keyArg, holder)
	if err != nil || n == -1 {
		rec.Outcome = outcomeInterrupted
		if err != nil {
			rec.Err = "enter: " + err.Error()
		} else {
			rec.Err = "enter: redis-server was restarted"
		}
		release()
		return rec
	}
	rec.EnterRan, rec.EnterN = true, n
	rec.Victim = victim == 1
	if rec.Victim {
		for len(w.releases) > 0 {
			<-w.releases // meant for an earlier hold
		}
	}
	if !w.quiet {
		w.out.emit(event{Ev: "step", Iter: rec}) // the master learns of an open hold at once
	}

	w.write(ctx, rec, "enter")

	// Hold. A loss signal ends the hold, unless the scenario ignores it on
	// purpose (expiry), to show that the fence refuses the late write.
	hold := time.NewTimer(w.cfg.Hold)
	if w.cfg.IgnoreLoss {
		select {
		case <-hold.C:
		case <-ctx.Done():
		}
	} else {
		select {
		case <-hold.C:
		case <-lk.Done():
		case <-ctx.Done():
		}
	}
	hold.Stop()
	// A failover victim holds on, like a long job, until the master lets
	// it go after the failover, or until it is told that the lock is lost.
	if rec.Victim {
		w.holdOn(ctx, lk, rec.Fence)
	}

	w.write(ctx, rec, "exit")

	ok, m, err := pair(ctx, w.rdb, exitScript, w.keyArg, holder, epoch)
	rec.Exited = mono()
	switch {
	case err != nil:
		rec.Outcome, rec.Err = outcomeInterrupted, "exit: "+err.Error()
	case ok == 0:
		rec.Outcome, rec.Err = outcomeInterrupted, "exit: redis-server was restarted"
	default:
		rec.ExitRan = true
		fmt.Sscan(m, &rec.ExitN)
		rec.Outcome = outcomeCompleted
	}
	release()
	return rec
}

// stallTick is how often a holder checks that its process is being run.
const stallTick = 5 * time.Millisecond

// watchStalls records in rec (StallFrom, StallFor) the largest gap between
// two ticks of a goroutine that wakes every stallTick, from now until stop
// is called: how long the machine left this process unscheduled (or a
// signal stopped it). A holder not run for longer than its lease can bridge
// is paused as surely as by SIGSTOP. stop ends the watch and waits for it;
// rec's other fields are not touched.
func watchStalls(rec *iterRecord) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(stallTick)
		defer tick.Stop()
		last := mono()
		look := func() {
			now := mono()
			if gap := now - last; gap > rec.StallFor {
				rec.StallFrom, rec.StallFor = last, gap
			}
			last = now
		}
		for {
			select {
			case <-quit:
				look()
				return
			case <-tick.C:
				look()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done }) }
}

// holdOn holds the lock of fence until the master's "release FENCE", the
// lock's loss, or the end of the run.
func (w *worker) holdOn(ctx context.Context, lk *fencelock.Lock, fence int64) {
	for {
		select {
		case f := <-w.releases:
			if f == fence {
				return
			}
		case <-lk.Done():
			return
		case <-ctx.Done():
			return
		}
	}
}

// write writes to the fenced store with the lock's fence and records what
// the store said.
func (w *worker) write(ctx context.Context, rec *iterRecord, phase string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	wr := writeRecord{Phase: phase, Fence: rec.Fence, Start: mono()}
	value := fmt.Sprintf("worker %d iteration %d %s fence %d", w.cfg.ID, rec.Iter, phase, rec.Fence)
	err := w.store.Write(ctx, w.cfg.Key, rec.Fence, []byte(value))
	wr.End = mono()
	var stale *fence.StaleError
	switch {
	case err == nil:
		wr.Result = writeOK
	case errors.As(err, &stale):
		wr.Result, wr.Current = writeStale, stale.Current
	default:
		wr.Result, wr.Err = writeError, err.Error()
	}
	rec.Writes = append(rec.Writes, wr)
	if !w.quiet {
		w.out.emit(event{Ev: "step", Iter: rec})
	}
}

// QuietRedisLog silences go-redis's own log (connection pool dial errors,
// which it prints to stderr) for the whole process.
func QuietRedisLog() { redis.SetLogger(quietLogger{}) }

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// masterCommands reads the master's commands, a line each on stdin, for a
// fair or primitives worker: they arrive on cmds (trimmed), and next
// returns the next one, or false once ctx is done. The end of stdin (the
// master is gone) cancels ctx. Its reading goroutine ends with ctx.
func masterCommands(ctx context.Context, cancel context.CancelFunc, stdin io.Reader) (cmds <-chan string, next func() (string, bool)) {
	lines := make(chan string)
	go func() {
		defer cancel()
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			select {
			case lines <- strings.TrimSpace(sc.Text()):
			case <-ctx.Done():
				return
			}
		}
	}()
	return lines, func() (string, bool) {
		select {
		case c := <-lines:
			return c, true
		case <-ctx.Done():
			return "", false
		}
	}
}
