package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

// The primitives scenarios: one per primitive, each with worker
// processes of its own (the same binary, re-executed; one Client per
// process, several goroutines each), on a real Redis:
//
//   - semaphore: 4 processes x 3 goroutines take permits of a 3-permit
//     Client.Semaphore (lease 2s, hold 20ms) for 2s; then the master kill
//     -9s a process while it holds a permit, and goes on until the dead
//     permit is gone from the server.
//   - rwlock: 4 processes x (1 writer + 3 readers) on one Client.RWLock for
//     3s: readers hold 30ms and come back 10ms later, so that there is
//     nearly always a reader inside; writers hold 10ms and come back 100ms
//     later. Without writer preference the writers would starve.
//   - election: 4 processes campaign (Client.Campaign); the leader leads for
//     300ms, writing its term to the fenced store every 50ms, resigns and
//     campaigns again 50ms later. After 2s the master kill -9s the leader;
//     it goes on until another leads. The master watches with
//     Client.Observe throughout.
//   - jobs: 3 processes run the job of primJob (Client.RunJob, every
//     second) for 6 ticks (--iterations), their schedulers 0, 20 and 40ms
//     late plus up to 60ms of jitter; beside it, on another key, the
//     plain pattern: TryAcquire, run, Release.
//
// How the rules are checked (twice, independently, as for the lock):
//
//   - Every holder counts itself in on the server (the demo's own keys, a
//     set per kind: SADD, then SCARD of its own and of the other kind's set
//     in the same script) right after its Acquire returned, and out (SREM)
//     just before it releases. A count beyond the rule (more than 3
//     permits; a writer beside a reader or another writer; two leaders) is
//     a violation.
//   - Every hold's interval, Acquire returned to Release called, is stamped
//     with CLOCK_MONOTONIC; the master sweeps them for the same rules. The
//     holds of a process killed -9 are counted until their leases end on
//     the server (read from the server at the kill): the master takes them
//     out of the counter sets at once.
//   - Fences: a hold whose Acquire was called after another hold's Acquire
//     had returned must have a larger fence (per primitive; readers and
//     writers share one counter). The terms Observe reports must rise.
//   - Writers, leaders and job runs write to the fenced store with their
//     fence: an accepted write older than one accepted before it began is a
//     stale write accepted.
//   - Jobs: each run adds 1 to its tick's count on the server (HINCRBY); a
//     tick counted twice by RunJob is a double run.
//
// FAIL on a violation of a rule, a fence regression, a stale write
// accepted, a double run, or a kill that is never recovered from (the dead
// permit still there, or no new leader, 3s after its lease). Rates, waits
// and hand-over times are reported as figures, not judged.

// The primitives scenarios' names, also their Scenario.Prim.
const (
	primSemaphore = "semaphore"
	primRWLock    = "rwlock"
	primElection  = "election"
	primJobs      = "jobs"
)

// primPlan is how a primitives scenario runs: its processes and what each
// goroutine does (Scenario holds the lease and the hold).
type primPlan struct {
	procs, perProc int
	permits        int // semaphore
	writers        int // rwlock: writers per process
	think          time.Duration
	writeHold      time.Duration // rwlock writers
	writeThink     time.Duration
	heartbeat      time.Duration // election
	runFor         time.Duration // semaphore, election: before the kill; rwlock: the run
	kill           bool
}

// primKillBound is how long after the dead hold's lease ends the master
// waits for the permit to be gone, or another leader to lead, before it
// calls the kill unrecovered (FAIL). Generous: a busy machine delays the
// waiters that would take over.
const primKillBound = 3 * time.Second

// primAfterKill: the run goes on this long once the kill was recovered
// from, so that the next holders show in the figures.
const primAfterKill = 500 * time.Millisecond

func planFor(sc Scenario) primPlan {
	switch sc.Prim {
	case primSemaphore:
		return primPlan{procs: 4, perProc: 3, permits: 3, think: 5 * time.Millisecond, runFor: 2 * time.Second, kill: true}
	case primRWLock:
		return primPlan{procs: 4, perProc: 4, writers: 1, think: 10 * time.Millisecond,
			writeHold: 10 * time.Millisecond, writeThink: 100 * time.Millisecond, runFor: 3 * time.Second}
	case primElection:
		return primPlan{procs: 4, perProc: 1, think: 50 * time.Millisecond, heartbeat: 50 * time.Millisecond, runFor: 2 * time.Second, kill: true}
	default: // jobs: a RunJob scheduler and a plain one per process
		return primPlan{procs: 3, perProc: 2}
	}
}

// primKeys are the demo's own keys of a primitives scenario, beside the
// primitive's (same hash tag as the lock of keysFor).
type primKeys struct{ base, runs, plainRuns string }

func primKeysFor(namespace string) primKeys {
	base := namespace + ":{" + lockKey + "}:demo"
	return primKeys{base: base, runs: base + ":runs", plainRuns: base + ":plain-runs"}
}

// inside is the set of the holders of kind that are counted in.
func (k primKeys) inside(kind string) string { return k.base + ":inside:" + kind }

// PrimSummary is what a primitives scenario showed.
type PrimSummary struct {
	Kind    string `json:"kind"` // semaphore, rwlock, election, jobs
	Procs   int    `json:"procs"`
	PerProc int    `json:"goroutines_per_proc"`
	Permits int    `json:"permits,omitempty"` // semaphore
	RunFor  Millis `json:"run_ms"`            // first Acquire called -> last hold ended

	Holds     int     `json:"holds"` // permits, read and write holds, leaderships, job runs
	PerSecond float64 `json:"holds_per_s"`
	WaitP50   Millis  `json:"wait_p50_ms"` // Acquire (Campaign) called -> returned
	WaitP99   Millis  `json:"wait_p99_ms"`

	// MaxCounted and MaxSeen are the most holders at once (rwlock: readers)
	// by the server's counter and by the intervals.
	MaxCounted int `json:"max_counted"`
	MaxSeen    int `json:"max_seen"`
	// Beyond the rule: by the counter (Result.Violations too) and by the
	// intervals.
	Violations int `json:"violations"`
	Overlaps   int `json:"overlaps"`

	FenceRegressions int `json:"fence_regressions"`

	// rwlock
	Reads              int    `json:"reads,omitempty"`
	Writes             int    `json:"writes,omitempty"`
	WritesPerWriterMin int    `json:"writes_per_writer_min,omitempty"`
	WriterWaitP50      Millis `json:"writer_wait_p50_ms,omitempty"`
	WriterWaitP99      Millis `json:"writer_wait_p99_ms,omitempty"`
	WriterWaitMax      Millis `json:"writer_wait_max_ms,omitempty"`

	// election: resign -> the next leader's Campaign returned.
	Handovers   int    `json:"handovers,omitempty"`
	HandoverP50 Millis `json:"handover_p50_ms,omitempty"`
	HandoverMax Millis `json:"handover_max_ms,omitempty"`
	Observed    int    `json:"observed,omitempty"` // leaders (terms) Client.Observe reported

	Kill *PrimKill `json:"kill,omitempty"`

	// jobs
	Ticks           int `json:"ticks,omitempty"`
	Runs            int `json:"runs,omitempty"`          // RunJob runs, counted on the server
	DoubleRuns      int `json:"double_runs,omitempty"`   // ticks RunJob ran more than once
	Missed          int `json:"missed,omitempty"`        // ticks RunJob did not run
	PlainRuns       int `json:"plain_runs,omitempty"`    // the plain pattern's runs
	PlainDoubled    int `json:"plain_doubled,omitempty"` // ticks it ran more than once
	PlainMaxPerTick int `json:"plain_max_per_tick,omitempty"`
}

// PrimKill is the worker process the master kill -9ed while it held a
// permit (semaphore) or led (election).
type PrimKill struct {
	Proc      int    `json:"proc"`
	Pid       int    `json:"pid"`
	At        Millis `json:"at_ms"`         // the kill, since the start of the scenario
	Fence     int64  `json:"fence"`         // of the dead hold (election: its term)
	LeaseLeft Millis `json:"lease_left_ms"` // the dead hold's lease left on the server at the kill
	// Freed: semaphore: kill -> the dead permit gone from the server.
	Freed Millis `json:"freed_ms"`
	// Next: election: kill -> the next leader's Campaign returned; -1 if
	// none (semaphore: -1, the other permits pass around meanwhile).
	Next  Millis `json:"next_ms"`
	Bound Millis `json:"bound_ms"` // lease left + primKillBound: later is a FAIL
}

// primKillRec is the master's record of its kill.
type primKillRec struct {
	proc, pid      int
	stopAt, killAt int64 // mono
	fence          int64
	tokens         []string      // semaphore: the dead permits' tokens
	heldFrom       []int64       // mono: no earlier than each dead hold's lease was last set (leaseSetAtMost)
	leaseEnds      []int64       // mono: no later than each dead hold ended on the server (notePermits)
	seen           []int64       // semaphore: mono: when the last read that found each dead permit was sent
	leaseLeft      time.Duration // the longest
	freedAt        int64         // mono: semaphore: the dead permit was seen gone; 0 if not
	recovered      bool          // freed (semaphore) or another leader seen (election) within the bound
}

// primObserved is what the master saw of a primitives scenario.
type primObserved struct {
	plan        primPlan
	holds       []*primHold
	kill        *primKillRec
	leaders     []observedLeader // election: what Observe reported
	runs        map[string]string
	plain       map[string]string
	ticks       int
	observeErrs int
}

// observedLeader is a Leader Observe reported, and when.
type observedLeader struct {
	fencelock.Leader
	at int64
}

// primMaster runs a primitives scenario's worker processes.
type primMaster struct {
	r     *runner
	sc    Scenario
	plan  primPlan
	ns    string
	keys  primKeys
	locks *fencelock.Client // the master's own: Observe, Leader
	procs []*proc
	msgs  chan message

	holds    []*primHold
	st       *live
	done     map[int]bool
	runsDone map[int]bool
	reasons  []string
	started  time.Time
}

// runPrim runs a primitives scenario; runScenario hands it over at once.
func (r *runner) runPrim(ctx context.Context, sc Scenario) *Result {
	started := time.Now()
	plan := planFor(sc)
	ticks := 0
	if sc.Prim == primJobs {
		ticks = cmp.Or(r.cfg.Iterations, sc.Iterations)
	}
	res := newResult(sc, plan.procs*plan.perProc, ticks)
	res.Prim = &PrimSummary{Kind: sc.Prim, Procs: plan.procs, PerProc: plan.perProc, Permits: plan.permits, Ticks: ticks}
	defer func() {
		res.Elapsed = millis(time.Since(started))
		r.secrets.scrubResult(res)
	}()

	ns, scfg, _, teardown, err := r.setUpScenario(ctx, sc, res)
	if err != nil {
		return res.fail("%v", err)
	}
	defer teardown()

	locks := fencelock.New(redisbackend.New(r.rdb), fencelock.WithNamespace(ns))
	defer locks.Close()
	m := &primMaster{
		r: r, sc: sc, plan: plan, ns: ns, keys: primKeysFor(ns), locks: locks,
		msgs: make(chan message, 1024), st: &live{}, done: map[int]bool{}, runsDone: map[int]bool{}, started: started,
	}
	// The jobs' first tick: a whole second, once the workers have had time
	// to start (they wait for it).
	jobStart := time.Now().Truncate(time.Second).Add(3 * time.Second)
	var endWorkers func()
	m.procs, _, endWorkers, err = r.startWorkers(ctx, plan.procs, func(i int) workerConfig {
		pc := &primWorkerConfig{
			Kind: sc.Prim, Goroutines: plan.perProc, Permits: plan.permits, Writers: plan.writers,
			Hold: sc.Hold, Think: plan.think, WriteHold: plan.writeHold, WriteThink: plan.writeThink, Heartbeat: plan.heartbeat,
		}
		if sc.Prim == primJobs {
			pc.Start, pc.Ticks, pc.Late = jobStart, ticks, time.Duration(i)*20*time.Millisecond
		}
		return workerConfig{
			ID: i, RedisURL: r.redisURL, Namespace: ns, Key: lockKey, Scenario: sc.Name,
			Lease: sc.Lease, Hold: sc.Hold, Renew: sc.Renew, MaxWait: time.Minute, Store: scfg, Verbose: r.cfg.Verbose, Prim: pc,
		}
	}, m.msgs)
	defer endWorkers()
	if err != nil {
		return res.fail("%v", err)
	}

	obs := &primObserved{plan: plan, ticks: ticks}
	// Election: watch the leaders as an application would, throughout.
	stopObserve := func() {}
	if sc.Prim == primElection {
		octx, cancel := context.WithCancel(ctx)
		observed := make(chan struct{})
		go func() {
			defer close(observed)
			for l, err := range locks.Observe(octx, electionName) {
				if err != nil {
					obs.observeErrs++
					continue
				}
				obs.leaders = append(obs.leaders, observedLeader{Leader: l, at: mono()})
			}
		}()
		stopObserve = func() { cancel(); <-observed }
	}
	t0 := mono()
	for _, p := range m.procs {
		p.send("go")
	}
	if err := m.drive(ctx, obs); err != nil {
		m.reasons = append(m.reasons, err.Error())
	}
	stopObserve()
	m.finish(ctx)
	end := mono()

	if sc.Prim == primJobs {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		var err1, err2 error
		obs.runs, err1 = r.rdb.HGetAll(rctx, m.keys.runs).Result()
		obs.plain, err2 = r.rdb.HGetAll(rctx, m.keys.plainRuns).Result()
		cancel()
		if err := errors.Join(err1, err2); err != nil {
			m.reasons = append(m.reasons, "reading the runs counted on the server: "+err.Error())
		}
	}
	obs.holds = m.holds
	if ctx.Err() != nil {
		m.reasons = append(m.reasons, "interrupted")
	}
	res.Reasons = append(res.Reasons, m.reasons...)
	analyzePrim(res, obs, t0, end)
	res.Elapsed = millis(time.Since(started))
	r.progress.done(sc.Name, res)
	return res
}

// drive runs the scenario between "go" and the end: for its time, with
// its kill, or (jobs) until every process has run its ticks.
func (m *primMaster) drive(ctx context.Context, obs *primObserved) error {
	switch {
	case m.sc.Prim == primJobs:
		bound := time.Duration(obs.ticks)*time.Second + 30*time.Second
		if err := m.pump(ctx, mono()+int64(bound), func() bool { return len(m.runsDone) == len(m.live()) }); err != nil {
			return err
		}
		if len(m.runsDone) < len(m.live()) {
			return fmt.Errorf("the job schedulers did not finish their %d ticks within %v", obs.ticks, bound)
		}
		return nil
	case !m.plan.kill:
		return m.pump(ctx, mono()+int64(m.plan.runFor), nil)
	}
	if err := m.pump(ctx, mono()+int64(m.plan.runFor), nil); err != nil {
		return err
	}
	var k *primKillRec
	var err error
	m.while(func() {
		if m.sc.Prim == primSemaphore {
			k, err = m.killPermitHolder(ctx)
		} else {
			k, err = m.killLeader(ctx)
		}
	})
	obs.kill = k // nil if none was caught
	if err != nil {
		return err
	}
	return m.pump(ctx, mono()+int64(primAfterKill), nil)
}

// pump takes in the workers' messages until the mono deadline, or until
// stop (checked after each message and every 10ms) says so.
func (m *primMaster) pump(ctx context.Context, deadline int64, stop func() bool) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	progress := time.NewTicker(m.r.progress.interval())
	defer progress.Stop()
	for mono() < deadline && (stop == nil || !stop()) {
		select {
		case msg := <-m.msgs:
			m.handle(msg)
		case <-tick.C:
		case <-progress.C:
			m.r.progress.update(m.sc.Name, m.st, time.Since(m.started))
		case <-ctx.Done():
			return errors.New("interrupted")
		}
	}
	return nil
}

// while runs f in a goroutine of its own and takes in the workers'
// messages until it returns (so that they are never held up).
func (m *primMaster) while(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	for {
		select {
		case msg := <-m.msgs:
			m.handle(msg)
		case <-done:
			return
		}
	}
}

// handle takes in a worker's message.
func (m *primMaster) handle(msg message) {
	p := msg.p
	if msg.exited {
		if !m.done[p.id] && !p.killed.Load() {
			m.reasons = append(m.reasons, fmt.Sprintf("worker process %d exited early (%v); its stderr:\n%s", p.id, p.err, indent(p.stderr.String())))
		}
		return
	}
	switch msg.ev.Ev {
	case "hold":
		h := msg.ev.Hold
		if h == nil || h.Worker/m.plan.perProc != p.id {
			return
		}
		m.holds = append(m.holds, h)
		m.st.finished++
		if h.Kind == holdRun {
			m.st.entered++
		}
		if h.Entered {
			m.st.entered++
			m.st.maxInside = max(m.st.maxInside, h.EnterN)
			if primViolates(h, m.plan) {
				m.st.violations++
			}
		}
		for _, w := range h.Writes {
			if w.Result == writeStale {
				m.st.stale++
			}
		}
	case "run-done":
		m.runsDone[p.id] = true
	case "done":
		m.done[p.id] = true
	case "fatal":
		m.reasons = append(m.reasons, fmt.Sprintf("worker process %d: %s", p.id, msg.ev.Err))
	}
}

// live returns the processes still running (not killed).
func (m *primMaster) live() []*proc {
	var out []*proc
	for _, p := range m.procs {
		if p.alive() && !p.killed.Load() {
			out = append(out, p)
		}
	}
	return out
}

// finish ends the run ("end", then every live process's "run-done"), tells
// the processes to quit and waits until they have.
func (m *primMaster) finish(ctx context.Context) {
	live := m.live()
	for _, p := range live {
		if !m.runsDone[p.id] {
			p.send("end")
		}
	}
	deadline := mono() + int64(time.Minute)
	m.pump(context.WithoutCancel(ctx), deadline, func() bool {
		for _, p := range m.live() {
			if !m.runsDone[p.id] {
				return false
			}
		}
		return true
	})
	for _, p := range m.live() {
		p.send("quit")
	}
	m.pump(context.WithoutCancel(ctx), mono()+int64(30*time.Second), func() bool {
		for _, p := range m.procs {
			if p.alive() {
				return false
			}
		}
		return true
	})
	for _, p := range m.procs {
		if p.alive() {
			m.reasons = append(m.reasons, fmt.Sprintf("worker process %d did not quit within 30s", p.id))
		}
	}
}

// members returns the members of the inside set of kind, by process.
func (m *primMaster) members(ctx context.Context, kind string) (map[int][]string, error) {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	all, err := m.r.rdb.SMembers(qctx, m.keys.inside(kind)).Result()
	if err != nil {
		return nil, err
	}
	out := map[int][]string{}
	for _, mem := range all {
		if proc, _, _, ok := parseMember(mem); ok {
			out[proc] = append(out[proc], mem)
		}
	}
	return out, nil
}

// parseMember reads a member of an inside set (primMember).
func parseMember(s string) (proc, worker int, fence int64, ok bool) {
	n, err := fmt.Sscanf(s, "p%d.%d.%d", &proc, &worker, &fence)
	return proc, worker, fence, err == nil && n == 3
}

// stopHolder finds a live process with a holder of kind counted in and
// SIGSTOPs it. If it still has one counted in a moment later (a command it
// had sent still reaches the server) and confirm, given that holder's
// member, returns a record, it kill -9s the process (see kill) and returns
// the record; otherwise it lets the process go on and looks again.
func (m *primMaster) stopHolder(ctx context.Context, kind string, confirm func(p *proc, member string, stopAt int64) (*primKillRec, error)) (*primKillRec, error) {
	deadline := mono() + int64(10*time.Second)
	for mono() < deadline && ctx.Err() == nil {
		byProc, err := m.members(ctx, kind)
		var p *proc
		for _, q := range m.live() {
			if len(byProc[q.id]) > 0 && len(m.live()) >= 2 {
				p = q
				break
			}
		}
		if err != nil || p == nil {
			sleepCtx(ctx, 2*time.Millisecond)
			continue
		}
		stopAt := mono()
		if err := p.signal(syscall.SIGSTOP); err != nil {
			return nil, fmt.Errorf("SIGSTOP worker process %d: %w", p.id, err)
		}
		waitStopped(p.pid, 200*time.Millisecond)
		sleepCtx(context.WithoutCancel(ctx), 5*time.Millisecond)
		byProc, err = m.members(context.WithoutCancel(ctx), kind)
		var k *primKillRec
		if err == nil && len(byProc[p.id]) > 0 {
			k, err = confirm(p, byProc[p.id][0], stopAt)
		}
		if err != nil || k == nil {
			p.signal(syscall.SIGCONT)
			if err != nil {
				return nil, err
			}
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		k.killAt, err = m.kill(ctx, p, kind)
		return k, err
	}
	if ctx.Err() != nil {
		return nil, errors.New("interrupted")
	}
	return nil, fmt.Errorf("no worker process held a %s long enough to be stopped within 10s", kind)
}

// kill kill -9s the stopped process p and takes its holders of kind out
// of the counter set (they can do nothing more; their holds live on the
// server until their leases end, which the intervals account for).
func (m *primMaster) kill(ctx context.Context, p *proc, kind string) (int64, error) {
	p.killed.Store(true)
	killAt := mono()
	p.killAt.Store(killAt)
	if err := p.signal(syscall.SIGKILL); err != nil {
		return killAt, fmt.Errorf("kill -9 worker process %d: %w", p.id, err)
	}
	byProc, err := m.members(context.WithoutCancel(ctx), kind)
	if err == nil && len(byProc[p.id]) > 0 {
		err = m.r.rdb.SRem(context.WithoutCancel(ctx), m.keys.inside(kind), byProc[p.id]).Err()
	}
	if err != nil {
		return killAt, fmt.Errorf("taking the killed process's holders out of the count: %w", err)
	}
	return killAt, nil
}

// killPermitHolder kill -9s a worker process that holds a permit, then
// watches its permits on the server (the redisbackend semaphore's sorted
// set of tokens, which name the process: fairTokens) until they are gone.
func (m *primMaster) killPermitHolder(ctx context.Context) (*primKillRec, error) {
	semKey := m.ns + ":{" + lockKey + "}:sem" // redisbackend's layout (holds.go)
	k, err := m.stopHolder(ctx, holdPermit, func(p *proc, member string, stopAt int64) (*primKillRec, error) {
		_, _, fence, _ := parseMember(member)
		prefix := fairTokenPrefix(p.id)
		before := mono()
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		now, terr := m.r.rdb.Time(qctx).Result()
		permits, zerr := m.r.rdb.ZRangeWithScores(qctx, semKey, 0, -1).Result()
		after := mono()
		if err := errors.Join(terr, zerr); err != nil {
			return nil, fmt.Errorf("reading the semaphore's permits: %w", err)
		}
		k := &primKillRec{proc: p.id, pid: p.pid, stopAt: stopAt, fence: fence}
		for _, z := range permits {
			if tok, _ := z.Member.(string); strings.HasPrefix(tok, prefix) {
				// Scores are lease ends in server milliseconds, and now
				// is the server's clock in whole milliseconds.
				left := time.Duration(z.Score-float64(now.UnixMilli())) * time.Millisecond
				k.tokens = append(k.tokens, tok)
				k.heldFrom = append(k.heldFrom, max(stopAt, leaseSetAtMost(after, left, m.sc.Lease)))
				k.leaseEnds = append(k.leaseEnds, leaseEndAtLeast(before, left))
				k.leaseLeft = max(k.leaseLeft, left)
			}
		}
		if len(k.tokens) == 0 {
			return nil, nil // its permit lapsed meanwhile (a starved process): another
		}
		return k, nil
	})
	if err != nil || k == nil {
		return k, err
	}
	m.r.progress.logf("%s: kill -9 worker process %d (pid %d) holding a permit (fence %d, %v of its lease left)", m.sc.Name, k.proc, k.pid, k.fence, k.leaseLeft.Round(time.Millisecond))

	// Its permits are gone once a waiter's acquire has dropped them (at
	// the end of their lease: the waiters' fallback timers aim at it).
	bound := k.killAt + int64(k.leaseLeft+primKillBound)
	for mono() < bound && ctx.Err() == nil {
		sent := mono()
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		left, err := m.r.rdb.ZMScore(qctx, semKey, k.tokens...).Result()
		cancel()
		if err == nil && k.notePermits(sent, left) {
			k.freedAt, k.recovered = mono(), true
			break
		}
		sleepCtx(ctx, 10*time.Millisecond)
	}
	return k, nil
}

// notePermits records a read of the dead permits' scores (0: gone) sent
// at sent (mono), and reports whether all are gone. A permit found gone
// ends, for the hold intervals, no later than the last read that found it:
// its lease end read after the stop is no lower bound when a release by
// its process was on the way at the stop (the server frees the permit at
// once, and another holder may take it well before that lease end, which
// the intervals would count as one holder too many).
func (k *primKillRec) notePermits(sent int64, scores []float64) (allGone bool) {
	if k.seen == nil {
		k.seen = make([]int64, len(k.tokens))
		for i := range k.seen {
			k.seen[i] = k.stopAt // held when its process was stopped, at the latest
		}
	}
	allGone = true
	for i, s := range scores {
		if i >= len(k.seen) {
			break
		}
		if s != 0 {
			k.seen[i] = sent
			allGone = false
			continue
		}
		k.leaseEnds[i] = min(k.leaseEnds[i], k.seen[i])
	}
	return allGone
}

// leaseEndAtLeast returns a time (mono) no later than the end of a lease
// that had left of it on the server, read by a request sent after before.
// The server counts left from its clock in whole milliseconds, rounded
// down, so the real time left can be up to a millisecond shorter: without
// that millisecond, a kill -9ed holder's interval could end just after the
// next holder's began, an overlap that never was.
func leaseEndAtLeast(before int64, left time.Duration) int64 {
	return before + int64(left-time.Millisecond)
}

// leaseSetAtMost returns a time (mono) no earlier than the last setting
// (the acquisition or a renewal) of a lease that lasts lease from then and
// had left of it on the server, read by a request whose reply was in at
// after. The server ends a lease set at s at its clock in whole
// milliseconds (rounded down) plus lease, which is after s + lease - 1ms
// and no later than after + left.
//
// A dead hold counts in the intervals from here (or from the stop, if
// later), not from the stop alone: the master notes the stop before it
// sends SIGSTOP, and on a busy machine the process may run on a moment,
// let go of a hold whose interval then ends after the stop, and take the
// one that dies with it. From the stop, the two would count twice.
func leaseSetAtMost(after int64, left, lease time.Duration) int64 {
	return after + int64(left-lease+time.Millisecond)
}

// killLeader kill -9s the worker process that leads, then waits until
// another leads.
func (m *primMaster) killLeader(ctx context.Context) (*primKillRec, error) {
	k, err := m.stopHolder(ctx, holdLeader, func(p *proc, member string, stopAt int64) (*primKillRec, error) {
		_, _, term, _ := parseMember(member)
		before := mono()
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		l, err := m.locks.Leader(qctx, electionName)
		after := mono()
		if err != nil {
			return nil, fmt.Errorf("asking who leads: %w", err)
		}
		if l.ID != candidateID(p.id) || l.Term != term {
			return nil, nil // its lease lapsed meanwhile (a starved process): another
		}
		return &primKillRec{proc: p.id, pid: p.pid, stopAt: stopAt, fence: term, leaseLeft: l.TTL,
			heldFrom:  []int64{max(stopAt, leaseSetAtMost(after, l.TTL, m.sc.Lease))},
			leaseEnds: []int64{leaseEndAtLeast(before, l.TTL)}}, nil
	})
	if err != nil || k == nil {
		return k, err
	}
	term := k.fence
	m.r.progress.logf("%s: kill -9 the leader, worker process %d (pid %d, term %d, %v of its lease left)", m.sc.Name, k.proc, k.pid, term, k.leaseLeft.Round(time.Millisecond))
	bound := k.killAt + int64(k.leaseLeft+primKillBound)
	for mono() < bound && ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		l, err := m.locks.Leader(qctx, electionName)
		cancel()
		if err == nil && l.ID != "" && l.Term > term {
			k.recovered = true
			break
		}
		sleepCtx(ctx, 10*time.Millisecond)
	}
	return k, nil
}

// primViolates reports whether a hold's counts on entry break its rule.
func primViolates(h *primHold, plan primPlan) bool {
	switch h.Kind {
	case holdPermit:
		return h.EnterN > int64(plan.permits)
	case holdRead:
		return h.EnterOther > 0
	case holdWrite:
		return h.EnterN > 1 || h.EnterOther > 0
	case holdLeader:
		return h.EnterN > 1
	}
	return false
}

// analyzePrim fills res from what the master saw, and judges it.
func analyzePrim(res *Result, obs *primObserved, t0, end int64) {
	ps := res.Prim
	plan := obs.plan
	var holds []*primHold // acquired, of the primitive (not the plain pattern)
	var plain []*primHold
	for _, h := range obs.holds {
		switch {
		case h.Acquired == 0:
			res.Failed++
			if res.Failed <= 3 {
				res.Notes = append(res.Notes, fmt.Sprintf("%s: worker %d: %s", res.Scenario, h.Worker, h.Err))
			}
		case h.Kind == holdPlainRun:
			plain = append(plain, h)
		default:
			holds = append(holds, h)
			if h.Err != "" {
				res.Failed++
				res.Notes = append(res.Notes, fmt.Sprintf("%s: worker %d (fence %d): %s", res.Scenario, h.Worker, h.Fence, h.Err))
			}
		}
	}
	ps.Holds = len(holds)
	res.Acquisitions = len(holds)

	// Counts, waits, the counter's verdict.
	var waits, writerWaits []float64
	perWriter := map[int]int{}
	first, last := end, t0
	for _, h := range holds {
		first, last = min(first, h.AcquireStart), max(last, h.End)
		if h.Kind == holdRun {
			res.Entered++ // a run: no count on the server but its tick's
		}
		if h.Entered {
			res.Entered++
			if h.Kind != holdWrite {
				ps.MaxCounted = max(ps.MaxCounted, int(h.EnterN))
			}
			if primViolates(h, plan) {
				res.Violations++
				if res.Violations <= 3 {
					res.Reasons = append(res.Reasons, fmt.Sprintf("beyond the rule on the server's count: worker %d's %s (fence %d) entered with %d of its kind and %d of the other counted in",
						h.Worker, h.Kind, h.Fence, h.EnterN, h.EnterOther))
				}
			}
		}
		if h.End > 0 && h.Err == "" {
			res.Completed++
		}
		if h.Lost {
			res.LossSignals++
		}
		if res.FenceMin == 0 || h.Fence < res.FenceMin {
			res.FenceMin = h.Fence
		}
		res.FenceMax = max(res.FenceMax, h.Fence)
		w := float64(nanos(h.Acquired - h.AcquireStart))
		waits = append(waits, w)
		switch h.Kind {
		case holdRead:
			ps.Reads++
		case holdWrite:
			ps.Writes++
			writerWaits = append(writerWaits, w)
			perWriter[h.Worker]++
		}
	}
	ps.Violations = res.Violations
	if last > first {
		ps.RunFor = nanos(last - first)
		ps.PerSecond = float64(len(holds)) / (float64(ps.RunFor) / 1000)
	}
	ps.WaitP50, ps.WaitP99 = Millis(percentile(waits, 50)), Millis(percentile(waits, 99))
	if len(writerWaits) > 0 {
		ps.WriterWaitP50, ps.WriterWaitP99 = Millis(percentile(writerWaits, 50)), Millis(percentile(writerWaits, 99))
		ps.WriterWaitMax = Millis(slices.Max(writerWaits))
	}
	if ps.Kind == primRWLock {
		writers := plan.procs * plan.writers
		ps.WritesPerWriterMin = ps.Writes
		for p := range plan.procs {
			for g := range plan.writers {
				ps.WritesPerWriterMin = min(ps.WritesPerWriterMin, perWriter[p*plan.perProc+g])
			}
		}
		if ps.Writes == 0 && writers > 0 {
			res.Reasons = append(res.Reasons, fmt.Sprintf("writers starved: %d writers got no write hold in %v of readers", writers, ps.RunFor))
		}
	}

	primSweep(res, obs, holds)
	primFences(res, obs, holds)
	primStale(res, holds)
	switch ps.Kind {
	case primElection:
		primElectionFigures(res, obs, holds)
	case primJobs:
		primJobFigures(res, obs, plain)
	}
	if k := obs.kill; k != nil {
		primKillFigures(res, obs, holds, t0)
	} else if plan.kill && len(res.Reasons) == 0 {
		res.Reasons = append(res.Reasons, "no worker process was kill -9ed")
	}
	res.MaxConcurrent = ps.MaxSeen
	if len(res.Reasons) > 0 {
		res.Status = StatusFail
	}
	res.Verdict = primVerdict(res)
}

// primSweep sweeps the hold intervals (Acquire returned -> Release called;
// a killed process's holds: from its SIGSTOP, or the last setting of
// their lease if later, to the end of their lease on the server) for the
// most holders at once and for breaks of the rule.
func primSweep(res *Result, obs *primObserved, holds []*primHold) {
	ps := res.Prim
	var pts []sweepPoint
	var spans []sweepSpan // what each interval is, for a failure's reason
	add := func(from, to int64, kind, name string) {
		if to <= from || kind == holdPlainRun {
			return
		}
		w := kind == holdWrite
		pts = append(pts, sweepPoint{from, 1, w, len(spans)}, sweepPoint{to, -1, w, len(spans)})
		spans = append(spans, sweepSpan{name, from, to})
	}
	for _, h := range holds {
		add(h.Acquired, h.End, h.Kind, fmt.Sprintf("worker %d's %s (fence %d)", h.Worker, h.Kind, h.Fence))
	}
	if k := obs.kill; k != nil {
		kind := holdPermit
		if ps.Kind == primElection {
			kind = holdLeader
		}
		for i, e := range k.leaseEnds {
			// Up to the end of the hold on the server, not to the kill:
			// on a busy machine the kill can come after the stopped
			// process's lease lapsed and another took its permit, which
			// is no overlap. Each end is a lower bound of the real one
			// (notePermits), so the intervals never count a holder too
			// many; the server's own count checks the rest.
			name := fmt.Sprintf("killed process %d's %s", k.proc, kind)
			if i < len(k.tokens) {
				name += " " + k.tokens[i]
			}
			from := k.stopAt
			if i < len(k.heldFrom) {
				from = max(from, k.heldFrom[i])
			}
			add(from, e, kind, name+" (from its stop, or the last setting of its lease, to its lease end)")
		}
	}
	// Ends before starts at the same instant: intervals are half-open.
	slices.SortFunc(pts, func(a, b sweepPoint) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
	var others, writers int    // holders that are not writers; writers
	open := make(map[int]bool) // the intervals open, by index into spans
	broken := false
	for _, p := range pts {
		if p.write {
			writers += p.delta
		} else {
			others += p.delta
		}
		if p.delta > 0 {
			open[p.what] = true
		} else {
			delete(open, p.what)
		}
		ps.MaxSeen = max(ps.MaxSeen, others)
		bad := false
		switch ps.Kind {
		case primSemaphore:
			bad = others > ps.Permits
		case primRWLock:
			bad = writers > 1 || (writers == 1 && others > 0)
		case primElection, primJobs:
			bad = others > 1 // one leader; one run at a time
		}
		if bad && !broken {
			ps.Overlaps++
			if ps.Overlaps <= 3 {
				res.Reasons = append(res.Reasons, fmt.Sprintf("beyond the rule in the hold intervals: %d holders and %d writers at once, %v into the run: %s",
					others, writers, nanos(p.at-pts[0].at), openSpans(open, spans, pts[0].at)))
			}
		}
		broken = bad
	}
}

// sweepPoint is a start (delta 1) or an end (delta -1) of a hold
// interval, for primSweep.
type sweepPoint struct {
	at    int64
	delta int
	write bool
	what  int // the interval: an index into primSweep's spans
}

// sweepSpan is a hold interval of primSweep, named for a failure's reason.
type sweepSpan struct {
	name     string
	from, to int64 // mono
}

// openSpans names the spans in open (indexes into spans) with their starts
// and ends relative to t0, for a failure's reason.
func openSpans(open map[int]bool, spans []sweepSpan, t0 int64) string {
	ids := slices.Sorted(maps.Keys(open))
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		sp := spans[id]
		parts = append(parts, fmt.Sprintf("%s %.3f-%.3f ms", sp.name, float64(sp.from-t0)/1e6, float64(sp.to-t0)/1e6))
	}
	return strings.Join(parts, "; ")
}

// primFences checks that a hold whose Acquire was called after another's
// had returned has a larger fence.
func primFences(res *Result, obs *primObserved, holds []*primHold) {
	ps := res.Prim
	byAcquired := slices.Clone(holds)
	slices.SortFunc(byAcquired, func(a, b *primHold) int { return cmp.Compare(a.Acquired, b.Acquired) })
	byStart := slices.Clone(holds)
	slices.SortFunc(byStart, func(a, b *primHold) int { return cmp.Compare(a.AcquireStart, b.AcquireStart) })
	var top *primHold // the largest fence among the holds acquired so far
	i := 0
	for _, h := range byStart {
		for ; i < len(byAcquired) && byAcquired[i].Acquired < h.AcquireStart; i++ {
			if top == nil || byAcquired[i].Fence > top.Fence {
				top = byAcquired[i]
			}
		}
		if top != nil && h.Fence <= top.Fence {
			ps.FenceRegressions++
			if ps.FenceRegressions <= 3 {
				res.Reasons = append(res.Reasons, fmt.Sprintf("fence regression: worker %d's %s got fence %d, after worker %d's %s had got %d before it asked",
					h.Worker, h.Kind, h.Fence, top.Worker, top.Kind, top.Fence))
			}
		}
	}
	// The terms Observe reported rise.
	var term int64
	for _, l := range obs.leaders {
		if l.ID == "" {
			continue
		}
		if l.Term <= term {
			ps.FenceRegressions++
			res.Reasons = append(res.Reasons, fmt.Sprintf("Observe reported leader %s with term %d after term %d", l.ID, l.Term, term))
		}
		term = max(term, l.Term)
	}
}

// primStale counts the writes to the fenced store and the stale ones: an
// accepted write whose fence is below that of a write accepted before it
// began.
func primStale(res *Result, holds []*primHold) {
	var ok []writeRecord
	for _, h := range holds {
		for _, w := range h.Writes {
			res.Writes++
			switch w.Result {
			case writeOK:
				ok = append(ok, w)
			case writeStale:
				res.StaleAttempted++
			default:
				res.WriteErrors++
			}
		}
	}
	byEnd := slices.Clone(ok)
	slices.SortFunc(byEnd, func(a, b writeRecord) int { return cmp.Compare(a.End, b.End) })
	slices.SortFunc(ok, func(a, b writeRecord) int { return cmp.Compare(a.Start, b.Start) })
	var top int64
	i := 0
	for _, w := range ok {
		for ; i < len(byEnd) && byEnd[i].End < w.Start; i++ {
			top = max(top, byEnd[i].Fence)
		}
		if w.Fence < top {
			res.StaleAccepted++
			if res.StaleAccepted <= 3 {
				res.Reasons = append(res.Reasons, fmt.Sprintf("stale write accepted: fence %d after a write with fence %d had been accepted", w.Fence, top))
			}
		}
	}
}

// primElectionFigures: hand-overs on resign (resign called -> the next
// leader's Campaign returned) and the leaders Observe reported.
func primElectionFigures(res *Result, obs *primObserved, holds []*primHold) {
	ps := res.Prim
	leaders := slices.Clone(holds)
	slices.SortFunc(leaders, func(a, b *primHold) int { return cmp.Compare(a.Acquired, b.Acquired) })
	var hand []float64
	for i := 1; i < len(leaders); i++ {
		prev, cur := leaders[i-1], leaders[i]
		if prev.Lost || prev.ReleaseEnd == 0 || cur.Acquired < prev.End {
			continue
		}
		if k := obs.kill; k != nil && k.killAt > prev.End && k.killAt < cur.Acquired {
			continue // the killed leader led in between
		}
		hand = append(hand, float64(nanos(cur.Acquired-prev.End)))
	}
	ps.Handovers = len(hand)
	if len(hand) > 0 {
		ps.HandoverP50, ps.HandoverMax = Millis(percentile(hand, 50)), Millis(slices.Max(hand))
		res.Handoffs, res.HandoffP50, res.HandoffP99 = len(hand), ps.HandoverP50, Millis(percentile(hand, 99))
	}
	for _, l := range obs.leaders {
		if l.ID != "" {
			ps.Observed++
		}
	}
	if obs.observeErrs > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("election: Observe reported %d errors", obs.observeErrs))
	}
}

// primJobFigures counts the runs per tick on the server: RunJob's and the
// plain pattern's.
func primJobFigures(res *Result, obs *primObserved, plain []*primHold) {
	ps := res.Prim
	count := func(m map[string]string) (total, doubled, missed, most int) {
		for tick := range obs.ticks {
			n, _ := strconv.Atoi(m[strconv.Itoa(tick)])
			total += n
			most = max(most, n)
			switch {
			case n == 0:
				missed++
			case n > 1:
				doubled++
			}
		}
		return
	}
	var most int
	ps.Runs, ps.DoubleRuns, ps.Missed, most = count(obs.runs)
	ps.PlainRuns, ps.PlainDoubled, _, ps.PlainMaxPerTick = count(obs.plain)
	if ps.DoubleRuns > 0 {
		res.Reasons = append(res.Reasons, fmt.Sprintf("double run: RunJob ran %d of %d ticks more than once (up to %d times)", ps.DoubleRuns, obs.ticks, most))
	}
	if ps.Missed > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("jobs: %d of %d ticks had no run (a scheduler later than the tick's period on a busy machine; not a double run)", ps.Missed, obs.ticks))
	}
	if len(plain) != ps.PlainRuns {
		res.Notes = append(res.Notes, fmt.Sprintf("jobs: the plain pattern reported %d runs, the server counted %d", len(plain), ps.PlainRuns))
	}
}

// primKillFigures: the kill's lease left, when the dead hold was freed and
// when the next holder came, and whether that was within the bound.
func primKillFigures(res *Result, obs *primObserved, holds []*primHold, t0 int64) {
	ps, k := res.Prim, obs.kill
	res.Killed = 1
	pk := &PrimKill{
		Proc: k.proc, Pid: k.pid, At: nanos(k.killAt - t0), Fence: k.fence,
		LeaseLeft: millis(k.leaseLeft), Freed: -1, Next: -1, Bound: millis(k.leaseLeft + primKillBound),
	}
	ps.Kill = pk
	if k.freedAt > 0 {
		pk.Freed = nanos(k.freedAt - k.killAt)
	}
	// The next leader.
	for _, h := range holds {
		if ps.Kind == primElection && h.Acquired > k.killAt && (pk.Next < 0 || nanos(h.Acquired-k.killAt) < pk.Next) {
			pk.Next = nanos(h.Acquired - k.killAt)
		}
	}
	what := "its permit was not freed"
	if ps.Kind == primElection {
		what = "no other candidate led"
	}
	if !k.recovered {
		res.Reasons = append(res.Reasons, fmt.Sprintf("%s within %v of the kill -9 (its lease had %v left)", what, pk.Bound, pk.LeaseLeft))
	}
}

// primVerdict sums a primitives scenario up in a sentence or two.
func primVerdict(res *Result) string {
	ps := res.Prim
	kill := func(what string) string {
		k := ps.Kill
		if k == nil {
			return ""
		}
		s := fmt.Sprintf(" A %s kill -9ed with %v of its lease left", what, k.LeaseLeft)
		if ps.Kind == primElection {
			return s + fmt.Sprintf(": the next leader led %v after the kill.", showTakeover(k.Next))
		}
		return s + fmt.Sprintf(": its permit was gone from the server %v after the kill.", showTakeover(k.Freed))
	}
	switch ps.Kind {
	case primSemaphore:
		return fmt.Sprintf("%d permits taken (%.0f/s) by %d goroutines in %d processes; at most %d held at once by the server's count, %d by the intervals (%d allowed); wait p50 %v, p99 %v.%s",
			ps.Holds, ps.PerSecond, ps.Procs*ps.PerProc, ps.Procs, ps.MaxCounted, ps.MaxSeen, ps.Permits, ps.WaitP50, ps.WaitP99, kill("permit holder"))
	case primRWLock:
		return fmt.Sprintf("%d reads and %d writes in %v; up to %d readers at once (counted), never a writer beside anyone; each writer got in %d times or more, waiting p50 %v, p99 %v, at most %v, past a stream of readers.",
			ps.Reads, ps.Writes, ps.RunFor, ps.MaxCounted, ps.WritesPerWriterMin, ps.WriterWaitP50, ps.WriterWaitP99, ps.WriterWaitMax)
	case primElection:
		return fmt.Sprintf("%d terms, one leader at a time; on resign the next leader led after %v (p50, max %v); Observe saw %d leaders, their terms rising.%s",
			ps.Holds, ps.HandoverP50, ps.HandoverMax, ps.Observed, kill("leader"))
	case primJobs:
		return fmt.Sprintf("RunJob ran %d times in %d ticks (%d ticks twice or more); the plain TryAcquire pattern beside it ran %d times (%d ticks twice or more, up to %d in one).",
			ps.Runs, ps.Ticks, ps.DoubleRuns, ps.PlainRuns, ps.PlainDoubled, ps.PlainMaxPerTick)
	}
	return ""
}

// primRows adds the primitives scenarios' rows to the report's table
// ("-" in the other columns).
func primRows(row func(label string, f func(r *Result) string)) {
	prim := func(f func(ps *PrimSummary) string) func(r *Result) string {
		return func(r *Result) string {
			if r.Prim == nil {
				return "-"
			}
			return f(r.Prim)
		}
	}
	row("primitive: rule", prim(func(ps *PrimSummary) string {
		switch ps.Kind {
		case primSemaphore:
			return fmt.Sprintf("<= %d permits held", ps.Permits)
		case primRWLock:
			return "a writer alone"
		case primElection:
			return "one leader"
		}
		return "one run a tick"
	}))
	row("most at once: counted / intervals", prim(func(ps *PrimSummary) string {
		switch ps.Kind {
		case primJobs:
			return fmt.Sprintf("- / %d run", ps.MaxSeen)
		case primRWLock:
			return fmt.Sprintf("%d / %d readers", ps.MaxCounted, ps.MaxSeen)
		}
		return fmt.Sprintf("%d / %d", ps.MaxCounted, ps.MaxSeen)
	}))
	row("beyond the rule: counted / intervals", prim(func(ps *PrimSummary) string {
		if ps.Kind == primJobs {
			return fmt.Sprintf("%d double runs / %d", ps.DoubleRuns, ps.Overlaps)
		}
		return fmt.Sprintf("%d / %d", ps.Violations, ps.Overlaps)
	}))
	row("fence regressions", prim(func(ps *PrimSummary) string { return fmt.Sprint(ps.FenceRegressions) }))
	row("holds per s, wait p50 / p99", prim(func(ps *PrimSummary) string {
		if ps.Kind == primJobs {
			return "-"
		}
		return fmt.Sprintf("%.0f, %v / %v", ps.PerSecond, ps.WaitP50, ps.WaitP99)
	}))
	row("rwlock: reads / writes, writer wait p99 / max", prim(func(ps *PrimSummary) string {
		if ps.Kind != primRWLock {
			return "-"
		}
		return fmt.Sprintf("%d / %d, %v / %v", ps.Reads, ps.Writes, ps.WriterWaitP99, ps.WriterWaitMax)
	}))
	row("election: resign -> next leader p50 / max", prim(func(ps *PrimSummary) string {
		if ps.Kind != primElection || ps.Handovers == 0 {
			return "-"
		}
		return fmt.Sprintf("%v / %v", ps.HandoverP50, ps.HandoverMax)
	}))
	row("kill -9: lease left / freed or next leader", prim(func(ps *PrimSummary) string {
		k := ps.Kill
		if k == nil {
			return "-"
		}
		if ps.Kind == primElection {
			return k.LeaseLeft.String() + " / " + showTakeover(k.Next)
		}
		return k.LeaseLeft.String() + " / " + showTakeover(k.Freed)
	}))
	row("jobs: runs in ticks, RunJob / plain", prim(func(ps *PrimSummary) string {
		if ps.Kind != primJobs {
			return "-"
		}
		return fmt.Sprintf("%d in %d / %d in %d", ps.Runs, ps.Ticks, ps.PlainRuns, ps.Ticks)
	}))
}

// PrimLength says how long a primitives scenario runs, for the help
// text's brackets ("" for other scenarios).
func (s Scenario) PrimLength() string {
	if s.Prim == "" {
		return ""
	}
	plan := planFor(s)
	switch {
	case s.Prim == primJobs:
		return fmt.Sprintf("%d ticks", s.Iterations)
	case plan.kill:
		return fmt.Sprintf("%v, then a kill", plan.runFor)
	}
	return plan.runFor.String()
}
