package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/redis/go-redis/v9"
)

// primWorkerConfig is the primitives scenarios' part of a worker's
// configuration (prims.go says what each scenario does with it).
type primWorkerConfig struct {
	Kind       string `json:"kind"`       // primSemaphore, primRWLock, primElection, primJobs
	Goroutines int    `json:"goroutines"` // contending goroutines in the process, sharing its Client

	Permits int `json:"permits,omitempty"` // semaphore
	Writers int `json:"writers,omitempty"` // rwlock: the process's first Writers goroutines write, the others read

	Hold  time.Duration `json:"hold"`  // semaphore permit, read hold, leader's term
	Think time.Duration `json:"think"` // pause between a release (or resign) and the next acquire
	// WriteHold and WriteThink are the rwlock writers' Hold and Think.
	WriteHold  time.Duration `json:"write_hold,omitempty"`
	WriteThink time.Duration `json:"write_think,omitempty"`
	// Heartbeat: election: the leader writes its term to the fenced store
	// this often while it leads.
	Heartbeat time.Duration `json:"heartbeat,omitempty"`

	// Jobs: the first tick (wall clock: what a scheduler goes by), the
	// number of ticks, one a second, and how late this process's scheduler
	// fires (plus up to jobJitter at random).
	Start time.Time     `json:"start,omitzero"`
	Ticks int           `json:"ticks,omitempty"`
	Late  time.Duration `json:"late,omitempty"`
}

// primHold is one hold a primitives worker took: a permit, a read or write
// hold, a leadership, a job run. Times are mono() readings.
type primHold struct {
	Worker int    `json:"worker"` // goroutine number across the scenario (process x goroutines + index)
	Iter   int    `json:"iter"`
	Kind   string `json:"kind"` // holdPermit, holdRead, holdWrite, holdLeader, holdRun, holdPlainRun
	Fence  int64  `json:"fence,omitempty"`
	Tick   int    `json:"tick,omitempty"` // jobs: the tick it ran for

	AcquireStart int64         `json:"acquire_start"`         // Acquire (Campaign, RunJob) called
	Acquired     int64         `json:"acquired,omitempty"`    // it returned the hold (job: the run began)
	End          int64         `json:"end,omitempty"`         // the hold ended: Release (Resign) about to be called; job: the run returned
	ReleaseEnd   int64         `json:"release_end,omitempty"` // Release (Resign) returned
	Entered      bool          `json:"entered,omitempty"`     // the entry script ran
	EnterN       int64         `json:"enter_n,omitempty"`     // holders of its kind counted in on the server, itself included
	EnterOther   int64         `json:"enter_other,omitempty"` // rwlock: holders of the other kind counted in then
	Lost         bool          `json:"lost,omitempty"`        // told ErrLost before it let go
	Writes       []writeRecord `json:"writes,omitempty"`      // to the fenced store, with the hold's fence

	Err string `json:"err,omitempty"` // the acquire (or the run) failed
}

// The kinds of primHold.
const (
	holdPermit   = "permit"
	holdRead     = "read"
	holdWrite    = "write"
	holdLeader   = "leader"
	holdRun      = "run"       // a RunJob run
	holdPlainRun = "plain-run" // a run of the plain TryAcquire pattern
)

// jobJitter: each scheduler fires up to this late at random, on top of its
// process's Late, so that the attempts of a tick race.
const jobJitter = 60 * time.Millisecond

// primJob is the job of the jobs scenario. LockAtLeast covers the spread
// of the schedulers (Late + jitter: 100ms) and a busy machine's delays.
var primJob = fencelock.Job{Name: lockKey, Period: time.Second, LockAtLeast: 800 * time.Millisecond, LockAtMost: 10 * time.Second}

// plainJobKey is the lock of the plain pattern the jobs scenario compares
// RunJob with: TryAcquire, run, Release.
const plainJobKey = "plain-job:" + lockKey

// electionName is the election of the election scenario.
const electionName = lockKey

// candidateID is worker process proc's candidate id.
func candidateID(proc int) string { return fmt.Sprintf("p%d", proc) }

// The primitives worker's stdin commands:
//
//	go     start: every goroutine takes holds until "end" (jobs: runs
//	       its ticks, then prints "run-done" by itself)
//	end    each goroutine finishes the hold under way; then the worker
//	       prints "run-done"
//	quit   print "done" and exit
//
// EOF (the master is gone) ends the worker at once.

// runPrim is the body of a primitives-scenario worker process: its
// goroutines take holds of the scenario's primitive and report each on
// stdout once it ends (a "hold" event). cfg.ID is the process's number;
// each goroutine's worker number is cfg.ID x Goroutines + its index.
func (w *worker) runPrim(ctx context.Context, stdin io.Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmds, next := masterCommands(ctx, cancel, stdin)

	pc := w.cfg.Prim
	w.out.emit(event{Ev: "ready", Pid: w.pid})
	for {
		cmd, ok := next()
		if !ok {
			return nil
		}
		if cmd == "quit" {
			w.out.emit(event{Ev: "done"})
			return nil
		}
		if cmd != "go" {
			continue
		}
		ended := make(chan struct{})
		var wg sync.WaitGroup
		for g := range pc.Goroutines {
			gw := *w
			gw.cfg.ID = w.cfg.ID*pc.Goroutines + g
			gw.quiet = true // whole holds only: no steps
			proc := w.cfg.ID
			wg.Go(func() { gw.primLoop(ctx, ended, proc, g) })
		}
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		// Until "end", or until the goroutines are through (jobs).
		for running := true; running; {
			select {
			case c := <-cmds:
				if c == "end" {
					running = false
				}
			case <-finished:
				running = false
			case <-ctx.Done():
				running = false
			}
		}
		close(ended)
		<-finished
		if ctx.Err() != nil {
			return nil
		}
		w.out.emit(event{Ev: "run-done"})
	}
}

// primLoop is one goroutine: the process's g-th.
func (w *worker) primLoop(ctx context.Context, ended <-chan struct{}, proc, g int) {
	pc := w.cfg.Prim
	switch pc.Kind {
	case primJobs:
		if g == 0 {
			w.jobLoop(ctx, ended, false)
		} else {
			w.jobLoop(ctx, ended, true)
		}
		return
	}
	kind, hold, think := holdPermit, pc.Hold, pc.Think
	var acquire func(ctx context.Context) (*fencelock.Lock, error)
	renew := fencelock.WithAutoRenew(w.cfg.Renew)
	wait := fencelock.WithWait(time.Minute)
	switch pc.Kind {
	case primSemaphore:
		sem := w.locks.Semaphore(lockKey, pc.Permits)
		acquire = func(ctx context.Context) (*fencelock.Lock, error) { return sem.Acquire(ctx, w.cfg.Lease, renew, wait) }
	case primRWLock:
		rw := w.locks.RWLock(lockKey)
		if g < pc.Writers {
			kind, hold, think = holdWrite, pc.WriteHold, pc.WriteThink
			acquire = func(ctx context.Context) (*fencelock.Lock, error) {
				return rw.AcquireWrite(ctx, w.cfg.Lease, renew, wait)
			}
		} else {
			kind = holdRead
			acquire = func(ctx context.Context) (*fencelock.Lock, error) {
				return rw.AcquireRead(ctx, w.cfg.Lease, renew, wait)
			}
		}
	case primElection:
		kind = holdLeader
	}
	thinkT := time.NewTimer(0)
	defer thinkT.Stop()
	for i := 0; ; i++ {
		select {
		case <-ended:
			return
		case <-ctx.Done():
			return
		default:
		}
		var rec *primHold
		if kind == holdLeader {
			rec = w.leaderTerm(ctx, proc, i)
		} else {
			rec = w.primHoldOnce(ctx, kind, i, proc, hold, acquire)
		}
		if ctx.Err() != nil && rec.End == 0 {
			return // stopping: do not report what the stop cut short
		}
		w.out.emit(event{Ev: "hold", Hold: rec})
		thinkT.Reset(think)
		select {
		case <-thinkT.C:
		case <-ended:
			return
		case <-ctx.Done():
			return
		}
	}
}

// primHoldOnce takes one hold with acquire, counts itself in on the server,
// writes to the fenced store (writers), holds, counts itself out and
// releases.
func (w *worker) primHoldOnce(ctx context.Context, kind string, i, proc int, hold time.Duration, acquire func(context.Context) (*fencelock.Lock, error)) *primHold {
	rec := &primHold{Worker: w.cfg.ID, Iter: i, Kind: kind, AcquireStart: mono()}
	lk, err := acquire(ctx)
	if err != nil {
		rec.Err = "acquire: " + err.Error()
		return rec
	}
	rec.Acquired, rec.Fence = mono(), lk.Fence()
	member := w.primEnter(ctx, rec, proc)
	if kind == holdWrite {
		w.primWrite(ctx, rec, "enter")
	}
	t := time.NewTimer(hold)
	select {
	case <-t.C:
	case <-lk.Done():
	case <-ctx.Done():
	}
	t.Stop()
	if kind == holdWrite {
		w.primWrite(ctx, rec, "exit")
	}
	w.primExit(ctx, rec, member)
	rec.End = mono()
	rec.Lost = errors.Is(lk.Err(), fencelock.ErrLost)
	if err := lk.Release(ctx); err != nil && !errors.Is(err, fencelock.ErrNotHeld) && rec.Err == "" {
		rec.Err = "release: " + err.Error()
	}
	rec.ReleaseEnd = mono()
	return rec
}

// leaderTerm campaigns, leads for Hold (writing its term to the fenced
// store every Heartbeat), and resigns.
func (w *worker) leaderTerm(ctx context.Context, proc, i int) *primHold {
	pc := w.cfg.Prim
	rec := &primHold{Worker: w.cfg.ID, Iter: i, Kind: holdLeader, AcquireStart: mono()}
	l, err := w.locks.Campaign(ctx, electionName, candidateID(proc), w.cfg.Lease, fencelock.WithAutoRenew(w.cfg.Renew))
	if err != nil {
		rec.Err = "campaign: " + err.Error()
		return rec
	}
	rec.Acquired, rec.Fence = mono(), l.Term()
	member := w.primEnter(ctx, rec, proc)
	end := time.NewTimer(pc.Hold)
	beat := time.NewTicker(pc.Heartbeat)
	for leading := true; leading; {
		w.primWrite(ctx, rec, "heartbeat")
		select {
		case <-beat.C:
		case <-end.C:
			leading = false
		case <-l.Done():
			leading = false
		case <-ctx.Done():
			leading = false
		}
	}
	end.Stop()
	beat.Stop()
	w.primExit(ctx, rec, member)
	rec.End = mono()
	rec.Lost = errors.Is(l.Err(), fencelock.ErrLost)
	if err := l.Resign(ctx); err != nil && !errors.Is(err, fencelock.ErrNotHeld) && rec.Err == "" {
		rec.Err = "resign: " + err.Error()
	}
	rec.ReleaseEnd = mono()
	return rec
}

// jobLoop is a process's scheduler: for each tick, at the tick plus the
// process's Late plus jitter, it calls RunJob (plain: the plain pattern,
// TryAcquire, run, Release). A run counts itself on the server (HINCRBY
// per tick), writes with its fence (RunJob) and lasts 0-40ms: a fast job.
func (w *worker) jobLoop(ctx context.Context, ended <-chan struct{}, plain bool) {
	pc := w.cfg.Prim
	keys := primKeysFor(w.cfg.Namespace)
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for tick := range pc.Ticks {
		scheduled := pc.Start.Add(time.Duration(tick) * time.Second)
		jitter := time.Duration(rand.N(int64(jobJitter)))
		t.Reset(time.Until(scheduled.Add(pc.Late + jitter)))
		select {
		case <-t.C:
		case <-ended:
			return
		case <-ctx.Done():
			return
		}
		rec := &primHold{Worker: w.cfg.ID, Iter: tick, Tick: tick, Kind: holdRun, AcquireStart: mono()}
		run := func(ctx context.Context, fence int64, counter string) error {
			rec.Acquired, rec.Fence = mono(), fence
			if err := w.rdb.HIncrBy(ctx, counter, strconv.Itoa(tick), 1).Err(); err != nil {
				return err
			}
			if !plain {
				w.primWrite(ctx, rec, "run")
			}
			time.Sleep(time.Duration(rand.N(int64(40 * time.Millisecond))))
			rec.End = mono()
			return nil
		}
		if plain {
			rec.Kind = holdPlainRun
			lk, err := w.locks.TryAcquire(ctx, plainJobKey, primJob.LockAtMost)
			switch {
			case errors.Is(err, fencelock.ErrNotAcquired):
				continue // another process has it now: this one skips
			case err != nil:
				rec.Err = "try acquire: " + err.Error()
			default:
				if err := run(ctx, lk.Fence(), keys.plainRuns); err != nil {
					rec.Err = "run: " + err.Error()
				}
				lk.Release(ctx)
			}
		} else {
			ran, err := w.locks.RunJob(ctx, primJob, scheduled, func(ctx context.Context, lk *fencelock.Lock) error {
				return run(ctx, lk.Fence(), keys.runs)
			})
			if !ran && err == nil {
				continue // another process has the tick
			}
			if err != nil {
				rec.Err = "run job: " + err.Error()
			}
		}
		w.out.emit(event{Ev: "hold", Hold: rec})
	}
}

// primEnter counts the holder in on the server (the demo's own keys, not
// the primitive's) and records the counts; it returns its member name.
func (w *worker) primEnter(ctx context.Context, rec *primHold, proc int) string {
	keys := primKeysFor(w.cfg.Namespace)
	mine, other := keys.inside(rec.Kind), keys.inside(rec.Kind)
	switch rec.Kind {
	case holdRead:
		other = keys.inside(holdWrite)
	case holdWrite:
		other = keys.inside(holdRead)
	}
	member := primMember(proc, rec.Worker, rec.Fence)
	res, err := primEnterScript.Run(ctx, w.rdb, []string{mine, other}, member).Int64Slice()
	if err != nil || len(res) != 2 {
		rec.Err = fmt.Sprintf("enter: %v %v", res, err)
		return member
	}
	rec.Entered, rec.EnterN, rec.EnterOther = true, res[0], res[1]
	return member
}

// primExit counts the holder out.
func (w *worker) primExit(ctx context.Context, rec *primHold, member string) {
	if !rec.Entered {
		return
	}
	keys := primKeysFor(w.cfg.Namespace)
	if err := w.rdb.SRem(ctx, keys.inside(rec.Kind), member).Err(); err != nil && rec.Err == "" {
		rec.Err = "exit: " + err.Error()
	}
}

// primWrite writes to the fenced store with the hold's fence.
func (w *worker) primWrite(ctx context.Context, rec *primHold, phase string) {
	r := &iterRecord{Iter: rec.Iter, Fence: rec.Fence}
	w.write(ctx, r, phase)
	rec.Writes = append(rec.Writes, r.Writes...)
}

// primMember names a holder in the demo's inside sets: its process first,
// so that the master can take a killed process's holders out.
func primMember(proc, worker int, fence int64) string {
	return fmt.Sprintf("%s%d.%d", fairTokenPrefix(proc), worker, fence)
}

// primEnterScript counts a holder in: it adds it to its kind's set and
// returns the size of that set (itself included) and of the other kind's
// (rwlock: readers for a writer, writers for a reader; otherwise the same
// set), read in the same atomic step.
//
//	KEYS: this kind's inside set, the other kind's    ARGV: member
var primEnterScript = redis.NewScript(`
redis.call('SADD', KEYS[1], ARGV[1])
return {redis.call('SCARD', KEYS[1]), redis.call('SCARD', KEYS[2])}
`)
