package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/fence"
)

// The fair scenario (the fair lock, fencelock.WithFairness) runs
// fairProcs worker processes of fairPerProc goroutines each, all on one key,
// holding for the scenario's Hold and thinking fairThink between turns. It
// makes three runs with the same processes:
//
//  1. plain: Acquire, for FairRunFor;
//  2. fair: Acquire WithFairness, for FairRunFor;
//  3. kill: WithFairness again; the master catches a worker process whose
//     goroutines all wait in the line on the server, kill -9s it, and goes
//     on until the line has moved past the dead waiters' places.
//
// Runs 1 and 2 are compared: hand-offs per second, waits, turns per worker.
// Run 3 shows that the hand-off goes on: the dead waiters hold the line up
// until their places lapse (driver.PlaceLease), no longer. Every
// iteration is the demo's usual one, so the referee's checks (the inside
// counter, the CLOCK_MONOTONIC intervals, the fenced store) judge all three
// runs. The fairness and wait figures are reported against the fair
// lock's targets, not judged: a busy machine moves them.
const (
	fairProcs   = 4
	fairPerProc = 4
	fairThink   = time.Millisecond

	// FairRunFor is how long the fair scenario runs each mode (plain
	// Acquire, then WithFairness).
	FairRunFor = 2 * time.Second

	// fairKillAfter: the third run kills this long after it began, when
	// every goroutine has had its turns and stands in line again.
	fairKillAfter = 300 * time.Millisecond
	// fairCatchFor bounds the search for a process with every goroutine in
	// line (at any instant, most are).
	fairCatchFor = 10 * time.Second
	// fairStallMargin: the line may stall for driver.PlaceLease after the kill
	// (the dead waiters' places have that long to lapse); a stall longer
	// than that plus this margin is a lost hand-off. Generous: a busy
	// machine delays the waiters that retry.
	fairStallMargin = 3 * time.Second
	// fairAfterKill: the third run ends once an acquisition came this long
	// after every dead place had lapsed (kill + driver.PlaceLease).
	fairAfterKill = 500 * time.Millisecond
)

// Run modes, as the worker's "go MODE" command names them.
const (
	fairModePlain = "plain"
	fairModeFair  = "fair"
)

// FairSummary is what the fair scenario showed.
type FairSummary struct {
	Procs   int    `json:"procs"`
	PerProc int    `json:"goroutines_per_proc"`
	Think   Millis `json:"think_ms"`

	Plain FairRun `json:"plain"` // plain Acquire
	Fair  FairRun `json:"fair"`  // WithFairness

	Kill *FairKill `json:"kill,omitempty"` // the third run's kill -9; nil if no process was caught in line

	FenceRegressions int `json:"fence_regressions"` // a fence not above every fence handed out before (all runs)
}

// FairRun is one mode's figures.
type FairRun struct {
	Mode         string  `json:"mode"`
	Duration     Millis  `json:"duration_ms"` // first Acquire called -> last Release returned
	Acquisitions int     `json:"acquisitions"`
	PerSecond    float64 `json:"handoffs_per_s"`
	WaitP50      Millis  `json:"wait_p50_ms"` // Acquire called -> returned
	WaitP99      Millis  `json:"wait_p99_ms"`
	// Hold is the mean time from Acquire returned to Release called: the
	// scenario's hold plus the referee's round trips (enter, two writes,
	// exit).
	Hold Millis `json:"hold_ms"`
	// Ideal is (N-1) x Hold: a waiter's wait when the lock goes round the N
	// workers in turn, with instant hand-offs.
	Ideal        Millis  `json:"ideal_ms"`
	P99VsIdeal   float64 `json:"p99_vs_ideal"`
	PerWorker    []int   `json:"per_worker"` // acquisitions of each goroutine
	PerWorkerMin int     `json:"per_worker_min"`
	PerWorkerMax int     `json:"per_worker_max"`
	MinMax       float64 `json:"min_max"`        // PerWorkerMin / PerWorkerMax
	HandoffP50   Millis  `json:"handoff_p50_ms"` // Release called -> a waiting goroutine's Acquire returned
	HandoffP99   Millis  `json:"handoff_p99_ms"`
}

// FairKill is the worker process kill -9ed while its goroutines waited in
// line.
type FairKill struct {
	Proc     int    `json:"proc"`
	Pid      int    `json:"pid"`
	At       Millis `json:"at_ms"`       // SIGSTOP (the kill's start), since the start of the scenario
	InLine   int    `json:"in_line"`     // its goroutines in line at the kill
	LineLen  int    `json:"line_len"`    // places in the line then
	Place    int    `json:"place"`       // the place of its first waiter (1: first in line)
	Lapse    Millis `json:"lapse_ms"`    // driver.PlaceLease: how long a dead place can last
	Bound    Millis `json:"bound_ms"`    // a stall longer than this is a lost hand-off
	Next     Millis `json:"next_ms"`     // kill -> the next Acquire returned; -1 if none
	Stall    Millis `json:"stall_ms"`    // the longest hand-off after the kill: the line held up by the dead places
	Handoffs int    `json:"handoffs"`    // acquisitions after the kill
	Left     int    `json:"places_left"` // its places still in the line at the end of the run
}

// fairObserved is what the master saw of the fair scenario, for analyze.
type fairObserved struct {
	runs []fairRunWindow // in order: plain, fair, kill
	kill *fairKillRec    // nil if no process was caught
	// stalled: no acquisition came in the run's last chance after the kill
	// (between kill + driver.PlaceLease + fairAfterKill and the bound).
	stalled bool
}

// fairRunWindow is one run, on the mono clock: from "go" to the moment the
// next run began (or the scenario ended).
type fairRunWindow struct {
	mode       string
	kill       bool
	start, end int64
}

// fairKillRec is the master's record of the kill.
type fairKillRec struct {
	proc, pid       int
	stopAt, killAt  int64 // mono
	inLine, lineLen int
	place           int
	left            int // its places left in line at the end of the run
}

// fairMaster runs the fair scenario's worker processes.
type fairMaster struct {
	r     *runner
	sc    Scenario
	keys  demoKeys
	queue string // the line's key on the server
	procs []*proc
	msgs  chan message

	recs     map[recKey]*iterRecord
	st       *live
	done     map[int]bool // processes that said "done"
	runsDone map[int]bool // processes that said "run-done" for the current run
	reasons  []string
	started  time.Time
}

// runFair runs the fair scenario; runScenario hands it over at once.
func (r *runner) runFair(ctx context.Context, sc Scenario) *Result {
	started := time.Now()
	res := newResult(sc, fairProcs, 0)
	res.Fair = &FairSummary{Procs: fairProcs, PerProc: fairPerProc, Think: millis(fairThink)}
	defer func() {
		res.Elapsed = millis(time.Since(started))
		r.secrets.scrubResult(res)
	}()

	ns, scfg, store, teardown, err := r.setUpScenario(ctx, sc, res)
	if err != nil {
		return res.fail("%v", err)
	}
	defer teardown()
	keys := keysFor(ns, lockKey)
	if err := r.rdb.Set(ctx, keys.epoch, "1", 0).Err(); err != nil {
		return res.fail("setting up keys: %v", err)
	}

	m := &fairMaster{
		r: r, sc: sc, keys: keys, queue: strings.TrimSuffix(keys.lock, ":lock") + ":queue",
		msgs: make(chan message, 1024), recs: map[recKey]*iterRecord{}, st: &live{},
		done: map[int]bool{}, started: started,
	}
	var endWorkers func()
	m.procs, _, endWorkers, err = r.startWorkers(ctx, fairProcs, func(i int) workerConfig {
		return workerConfig{
			ID: i, RedisURL: r.redisURL, Namespace: ns, Key: lockKey, Scenario: sc.Name,
			Lease: sc.Lease, Hold: sc.Hold, MaxWait: time.Minute, Store: scfg, Verbose: r.cfg.Verbose,
			Fair: &fairWorkerConfig{Goroutines: fairPerProc, Think: fairThink},
		}
	}, m.msgs)
	defer endWorkers()
	if err != nil {
		return res.fail("%v", err)
	}

	t0 := mono()
	obs := &fairObserved{}
	for _, run := range []fairRunWindow{{mode: fairModePlain}, {mode: fairModeFair}, {mode: fairModeFair, kill: true}} {
		run.start = mono()
		if n := len(obs.runs); n > 0 {
			obs.runs[n-1].end = run.start
		}
		obs.runs = append(obs.runs, run)
		if err := m.run(ctx, run, obs); err != nil {
			m.reasons = append(m.reasons, err.Error())
			break
		}
	}
	obs.runs[len(obs.runs)-1].end = mono()
	m.finish(ctx)
	end := mono()

	in := analysisInput{
		sc: sc, workers: fairProcs * fairPerProc, t0: t0, end: end,
		recs: m.recs, killedAt: map[int]int64{}, doneWorkers: map[int]bool{},
		ctlErrs: m.reasons, fair: obs,
	}
	for _, p := range m.procs {
		for g := range fairPerProc {
			w := p.id*fairPerProc + g
			if p.killed.Load() {
				in.killedAt[w] = p.killAt.Load()
			}
			in.doneWorkers[w] = m.done[p.id]
		}
	}
	if ctx.Err() != nil {
		in.stopped = "interrupted"
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_, token, rerr := store.Read(sctx, lockKey)
	cancel()
	switch {
	case errors.Is(rerr, fence.ErrNotFound):
	case rerr != nil:
		res.Notes = append(res.Notes, "could not read the store's final value: "+rerr.Error())
	default:
		in.storeToken = token
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	n, lerr := r.rdb.Exists(lctx, keys.lock).Result()
	cancel()
	in.lockLeft = lerr == nil && n > 0
	analyze(res, in)
	res.Elapsed = millis(time.Since(started))
	r.progress.done(sc.Name, res)
	return res
}

// live returns the processes still running (not killed).
func (m *fairMaster) live() []*proc {
	var out []*proc
	for _, p := range m.procs {
		if p.alive() && !p.killed.Load() {
			out = append(out, p)
		}
	}
	return out
}

// run makes one run: "go MODE" to every process, then (for its time, or in
// the kill run until the line has moved past the kill) "end", and waits for
// every live process's "run-done".
func (m *fairMaster) run(ctx context.Context, run fairRunWindow, obs *fairObserved) error {
	m.runsDone = map[int]bool{}
	for _, p := range m.live() {
		p.send("go " + run.mode)
	}
	endAt := run.start + int64(FairRunFor)
	var killed chan caught
	var kill *fairKillRec
	stopSearch := func() {}
	if run.kill {
		// Until the kill, the run lasts as long as the search may.
		endAt = run.start + int64(fairKillAfter+fairCatchFor+time.Second)
		killed = make(chan caught, 1)
		var kctx context.Context
		kctx, stopSearch = context.WithCancel(ctx)
		defer stopSearch()
		go func() {
			k, err := m.catchAndKill(kctx, run.start)
			killed <- caught{k, err}
		}()
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	progress := time.NewTicker(m.r.progress.interval())
	defer progress.Stop()

	// The kill run ends once an acquisition came after every dead place
	// had lapsed (moved on), or at the bound (stalled).
	var movedOn int64
	ended := false
	for !ended {
		select {
		case msg := <-m.msgs:
			rec := m.handle(msg)
			if kill != nil && rec != nil && rec.Acquired > movedOn {
				ended = true
			}
		case c := <-killed:
			killed = nil
			if c.err != nil {
				m.reasons = append(m.reasons, c.err.Error())
			}
			k := c.rec
			if k == nil {
				ended = true // no process caught in line
				break
			}
			kill, obs.kill = k, k
			movedOn = k.stopAt + int64(driver.PlaceLease+fairAfterKill)
			endAt = k.stopAt + int64(driver.PlaceLease+fairStallMargin)
		case <-tick.C:
			if mono() >= endAt {
				if kill != nil {
					obs.stalled = true
				}
				ended = true
			}
		case <-progress.C:
			m.r.progress.update(m.sc.Name, m.st, time.Since(m.started))
		case <-ctx.Done():
			return errors.New("interrupted")
		}
	}
	if killed != nil {
		// Ended before the search did (interrupted): stop it and wait, so
		// that it kills nothing after the run.
		stopSearch()
		<-killed
	}
	if kill != nil {
		kill.left = m.placesOf(context.WithoutCancel(ctx), kill.proc)
	}

	for _, p := range m.live() {
		p.send("end")
	}
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for {
		waiting := 0
		for _, p := range m.live() {
			if !m.runsDone[p.id] {
				waiting++
			}
		}
		if waiting == 0 {
			return nil
		}
		select {
		case msg := <-m.msgs:
			m.handle(msg)
		case <-deadline.C:
			return fmt.Errorf("%d worker processes did not end the %s run within a minute", waiting, run.mode)
		case <-ctx.Done():
			return errors.New("interrupted")
		}
	}
}

// handle takes in a worker's message; it returns the iteration it
// reported, if any.
func (m *fairMaster) handle(msg message) *iterRecord {
	p := msg.p
	if msg.exited {
		if !m.done[p.id] && !p.killed.Load() {
			m.reasons = append(m.reasons, fmt.Sprintf("worker process %d exited early (%v); its stderr:\n%s", p.id, p.err, indent(p.stderr.String())))
		}
		return nil
	}
	switch msg.ev.Ev {
	case "iter":
		rec := msg.ev.Iter
		if rec == nil || rec.Worker/fairPerProc != p.id {
			return nil
		}
		m.recs[recKey{rec.Worker, rec.Iter}] = rec
		m.st.finished++
		if rec.EnterRan {
			m.st.entered++
			m.st.maxInside = max(m.st.maxInside, rec.EnterN)
			if rec.EnterN != 1 || (rec.ExitRan && rec.ExitN != 0) {
				m.st.violations++
			}
		}
		for _, w := range rec.Writes {
			if w.Result == writeStale {
				m.st.stale++
			}
		}
		return rec
	case "run-done":
		m.runsDone[p.id] = true
	case "done":
		m.done[p.id] = true
	case "fatal":
		m.reasons = append(m.reasons, fmt.Sprintf("worker process %d: %s", p.id, msg.ev.Err))
	}
	return nil
}

// finish tells the processes to quit and waits until they have.
func (m *fairMaster) finish(ctx context.Context) {
	for _, p := range m.live() {
		p.send("quit")
	}
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		running := 0
		for _, p := range m.procs {
			if p.alive() {
				running++
			}
		}
		if running == 0 {
			return
		}
		select {
		case msg := <-m.msgs:
			m.handle(msg)
		case <-deadline.C:
			m.reasons = append(m.reasons, fmt.Sprintf("%d worker processes did not quit within 30s", running))
			return
		case <-ctx.Done():
			return
		}
	}
}

// line returns the tokens in the line on the server, first first.
func (m *fairMaster) line(ctx context.Context) ([]string, error) {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return m.r.rdb.ZRange(qctx, m.queue, 0, -1).Result()
}

// inLine returns how many of worker process proc's waiters are in line,
// and the place of the first (1: first in line; 0: none).
func inLine(line []string, proc int) (n, place int) {
	prefix := fairTokenPrefix(proc)
	for i, tok := range line {
		if strings.HasPrefix(tok, prefix) {
			n++
			if place == 0 {
				place = i + 1
			}
		}
	}
	return n, place
}

// placesOf counts worker process proc's places still in line.
func (m *fairMaster) placesOf(ctx context.Context, proc int) int {
	line, err := m.line(ctx)
	if err != nil {
		return -1
	}
	n, _ := inLine(line, proc)
	return n
}

// caught is what catchAndKill returns, through a channel.
type caught struct {
	rec *fairKillRec
	err error
}

// catchAndKill waits fairKillAfter into the run, then looks for a worker
// process whose goroutines all wait in the line (their tokens name the
// process), the one nearest the head first. It stops the process with
// SIGSTOP, so that what it checks stays true (a command the process had
// sent still reaches the server: it looks again after a moment), checks
// again and kill -9s it; if a goroutine left the line meanwhile, it lets
// the process go on and looks again. It returns nil if it caught none
// (with an error saying why, unless ctx ended).
func (m *fairMaster) catchAndKill(ctx context.Context, start int64) (*fairKillRec, error) {
	if !sleepCtx(ctx, time.Duration(start+int64(fairKillAfter)-mono())) {
		return nil, nil
	}
	candidate := func(line []string) (p *proc, place int) {
		for _, q := range m.live() {
			if n, at := inLine(line, q.id); n == fairPerProc && (p == nil || at < place) {
				p, place = q, at
			}
		}
		return p, place
	}
	deadline := mono() + int64(fairCatchFor)
	for mono() < deadline {
		line, err := m.line(ctx)
		if ctx.Err() != nil {
			return nil, nil
		}
		p, _ := candidate(line)
		if err != nil || p == nil || len(m.live()) < 2 {
			sleepCtx(ctx, 2*time.Millisecond)
			continue
		}
		stopAt := mono()
		if err := p.signal(syscall.SIGSTOP); err != nil {
			return nil, fmt.Errorf("SIGSTOP worker process %d: %w", p.id, err)
		}
		waitStopped(p.pid, 200*time.Millisecond)
		sleepCtx(context.WithoutCancel(ctx), 5*time.Millisecond)
		line, err = m.line(context.WithoutCancel(ctx))
		n, place := inLine(line, p.id)
		if err != nil || n != fairPerProc {
			p.signal(syscall.SIGCONT)
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		p.killed.Store(true)
		killAt := mono()
		p.killAt.Store(killAt)
		if err := p.signal(syscall.SIGKILL); err != nil {
			return nil, fmt.Errorf("kill -9 worker process %d: %w", p.id, err)
		}
		m.r.progress.logf("%s: kill -9 worker process %d (pid %d) with its %d goroutines in line, the first at place %d of %d",
			m.sc.Name, p.id, p.pid, n, place, len(line))
		return &fairKillRec{proc: p.id, pid: p.pid, stopAt: stopAt, killAt: killAt, inLine: n, lineLen: len(line), place: place}, nil
	}
	if ctx.Err() != nil {
		return nil, nil
	}
	return nil, fmt.Errorf("no worker process had all its goroutines in line at once within %v", fairCatchFor)
}

// analyzeFair fills res.Fair from the runs and judges what the fair
// scenario must show besides exclusion (analyze checks that): fences that
// only rise, and a line that moved on after the kill.
func analyzeFair(res *Result, in analysisInput, recs []*iterRecord) {
	fs := res.Fair
	if fs == nil {
		fs = &FairSummary{Procs: fairProcs, PerProc: fairPerProc, Think: millis(fairThink)}
		res.Fair = fs
	}
	obs := in.fair
	if obs == nil {
		obs = &fairObserved{}
	}

	// Acquisitions in the order their Acquire returned.
	var acq []*iterRecord
	for _, r := range recs {
		if r.Acquired > 0 && r.Fence > 0 {
			acq = append(acq, r)
		}
	}
	slices.SortFunc(acq, func(a, b *iterRecord) int { return cmp.Compare(a.Acquired, b.Acquired) })
	var top *iterRecord
	for _, r := range acq {
		if top != nil && r.Fence <= top.Fence {
			fs.FenceRegressions++
			if fs.FenceRegressions <= 3 {
				res.Reasons = append(res.Reasons, fmt.Sprintf("fence regression: worker %d acquired fence %d at %v, after worker %d had acquired fence %d at %v",
					r.Worker, r.Fence, nanos(r.Acquired-in.t0), top.Worker, top.Fence, nanos(top.Acquired-in.t0)))
			}
			continue
		}
		top = r
	}

	// Each run's acquisitions: those whose Acquire began in its window.
	inRun := func(w fairRunWindow) []*iterRecord {
		var out []*iterRecord
		for _, r := range acq {
			if r.AcquireStart >= w.start && r.AcquireStart < w.end {
				out = append(out, r)
			}
		}
		return out
	}
	for _, w := range obs.runs {
		switch {
		case w.kill:
			analyzeFairKill(res, in, obs, inRun(w))
		case w.mode == fairModePlain:
			fs.Plain = fairFigures(w.mode, inRun(w), in.workers)
		default:
			fs.Fair = fairFigures(w.mode, inRun(w), in.workers)
		}
	}
	if fs.Plain.Acquisitions == 0 || fs.Fair.Acquisitions == 0 {
		res.Reasons = append(res.Reasons, fmt.Sprintf("no acquisitions to compare: %d with plain Acquire, %d with WithFairness", fs.Plain.Acquisitions, fs.Fair.Acquisitions))
		return
	}
	res.Verdict = fairVerdict(fs)
}

// analyzeFairKill judges the kill run: the next acquisition after the kill,
// the longest hand-off after it (the line held up by the dead places), and
// whether the line moved on at all.
func analyzeFairKill(res *Result, in analysisInput, obs *fairObserved, acq []*iterRecord) {
	k := obs.kill
	if k == nil {
		return // catchAndKill gave the reason
	}
	fk := &FairKill{
		Proc: k.proc, Pid: k.pid, At: nanos(k.stopAt - in.t0), InLine: k.inLine, LineLen: k.lineLen, Place: k.place,
		Lapse: millis(driver.PlaceLease), Bound: millis(driver.PlaceLease + fairStallMargin),
		Next: -1, Left: k.left,
	}
	res.Fair.Kill = fk
	// acq is in the order the Acquires returned: the hand-offs are its
	// neighbours. A hand-off's time counts from the release, or from the
	// kill for the one under way then.
	for i, r := range acq {
		if r.Acquired <= k.stopAt {
			continue
		}
		fk.Handoffs++
		if fk.Next < 0 {
			fk.Next = nanos(r.Acquired - k.stopAt)
		}
		from := k.stopAt
		if i > 0 && acq[i-1].ReleaseStart > from {
			from = acq[i-1].ReleaseStart
		}
		fk.Stall = max(fk.Stall, nanos(r.Acquired-from))
	}
	switch {
	case fk.Next < 0:
		res.Reasons = append(res.Reasons, fmt.Sprintf("hand-off lost: no acquisition in the %v after worker process %d was kill -9ed in line", fk.Bound, k.proc))
	case obs.stalled:
		res.Reasons = append(res.Reasons, fmt.Sprintf("hand-off lost: no acquisition between %v and %v after the kill -9 (every dead place had lapsed by %v)",
			millis(driver.PlaceLease+fairAfterKill), fk.Bound, fk.Lapse))
	case fk.Stall > fk.Bound:
		res.Reasons = append(res.Reasons, fmt.Sprintf("hand-off lost: the line stalled %v after the kill -9, longer than driver.PlaceLease (%v) + %v", fk.Stall, fk.Lapse, millis(fairStallMargin)))
	}
	res.Notes = append(res.Notes, fmt.Sprintf("fair: worker process %d kill -9ed at %v with its %d goroutines in line (the first at place %d of %d): the next acquisition %v later; the line held up at most %v (the dead places lapse within driver.PlaceLease, %v); %d acquisitions after the kill; its places left in line at the end: %d",
		fk.Proc, fk.At, fk.InLine, fk.Place, fk.LineLen, showTakeover(fk.Next), fk.Stall, fk.Lapse, fk.Handoffs, fk.Left))
}

// fairFigures computes one mode's figures from its acquisitions (in the
// order their Acquires returned) for workers goroutines.
func fairFigures(mode string, acq []*iterRecord, workers int) FairRun {
	fr := FairRun{Mode: mode, Acquisitions: len(acq), PerWorker: make([]int, workers)}
	if len(acq) == 0 {
		return fr
	}
	var waits, handoffs []float64
	var held float64
	first, last := acq[0].AcquireStart, acq[0].ReleaseEnd
	for i, r := range acq {
		first, last = min(first, r.AcquireStart), max(last, r.ReleaseEnd, r.Exited)
		waits = append(waits, float64(nanos(r.Acquired-r.AcquireStart)))
		end := cmp.Or(r.ReleaseStart, r.Exited)
		held += float64(nanos(end - r.Acquired))
		if r.Worker >= 0 && r.Worker < workers {
			fr.PerWorker[r.Worker]++
		}
		// A hand-off: the previous holder released while this one waited.
		if i > 0 {
			prev := acq[i-1]
			if prev.ReleaseStart > 0 && r.AcquireStart < prev.ReleaseStart && r.Acquired > prev.ReleaseStart {
				handoffs = append(handoffs, float64(nanos(r.Acquired-prev.ReleaseStart)))
			}
		}
	}
	fr.Duration = nanos(last - first)
	if fr.Duration > 0 {
		fr.PerSecond = float64(len(acq)) / (float64(fr.Duration) / 1000)
	}
	fr.WaitP50, fr.WaitP99 = Millis(percentile(waits, 50)), Millis(percentile(waits, 99))
	fr.Hold = Millis(held / float64(len(acq)))
	fr.Ideal = Millis(float64(workers-1) * float64(fr.Hold))
	if fr.Ideal > 0 {
		fr.P99VsIdeal = float64(fr.WaitP99) / float64(fr.Ideal)
	}
	fr.PerWorkerMin, fr.PerWorkerMax = slices.Min(fr.PerWorker), slices.Max(fr.PerWorker)
	if fr.PerWorkerMax > 0 {
		fr.MinMax = float64(fr.PerWorkerMin) / float64(fr.PerWorkerMax)
	}
	fr.HandoffP50, fr.HandoffP99 = Millis(percentile(handoffs, 50)), Millis(percentile(handoffs, 99))
	return fr
}

// The targets for the fair lock (16 workers, hold 1 ms): reported,
// not judged.
const (
	fairTargetMinMax = 0.95
	fairTargetP99    = 1.5 // x (N-1) x hold
)

// fairVerdict sums the comparison up in a sentence or three.
func fairVerdict(fs *FairSummary) string {
	run := func(fr FairRun) string {
		return fmt.Sprintf("turns per worker min/max %.2f (%d/%d), p99 wait %v = %.1f x (N-1) x hold (%v, with the hold measured at %v), %.0f hand-offs/s",
			fr.MinMax, fr.PerWorkerMin, fr.PerWorkerMax, fr.WaitP99, fr.P99VsIdeal, fr.Ideal, fr.Hold, fr.PerSecond)
	}
	met := func(fr FairRun) string {
		var out []string
		if fr.MinMax >= fairTargetMinMax {
			out = append(out, "min/max met")
		} else {
			out = append(out, "min/max NOT met")
		}
		if fr.P99VsIdeal <= fairTargetP99 {
			out = append(out, "p99 met")
		} else {
			out = append(out, "p99 NOT met")
		}
		return strings.Join(out, ", ")
	}
	s := fmt.Sprintf("plain Acquire: %s. WithFairness: %s (targets: min/max >= %.2f, p99 <= %.1f x (N-1) x hold: %s).",
		run(fs.Plain), run(fs.Fair), fairTargetMinMax, fairTargetP99, met(fs.Fair))
	if k := fs.Kill; k != nil {
		s += fmt.Sprintf(" A worker process kill -9ed with its %d goroutines in line held the line up %v at most (driver.PlaceLease %v); the next acquisition came %v after the kill.",
			k.InLine, k.Stall, k.Lapse, showTakeover(k.Next))
	}
	return s
}
