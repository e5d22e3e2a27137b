package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/redis/go-redis/v9"
)

// recKey identifies an iteration.
type recKey struct{ worker, iter int }

// live counts what the workers reported so far, for the progress line and
// the controller's schedule. Only the run loop writes it.
type live struct {
	total, finished, entered int
	violations, stale        int
	maxInside                int64
}

// runScenario runs one scenario with fresh worker processes and reports.
func (r *runner) runScenario(ctx context.Context, sc Scenario) *Result {
	if sc.Fair {
		return r.runFair(ctx, sc) // runs of its own (fair.go)
	}
	if sc.Prim != "" {
		return r.runPrim(ctx, sc) // a primitive's own workers (prims.go)
	}
	started := time.Now()
	iterations := sc.Iterations
	if r.cfg.Iterations > 0 && !sc.isFailover() {
		iterations = r.cfg.Iterations
	}
	res := newResult(sc, r.cfg.Workers, iterations)
	defer func() {
		res.Elapsed = millis(time.Since(started))
		r.secrets.scrubResult(res) // worker output, driver errors: whatever they quoted
	}()

	failovers := r.failovers(sc)
	if sc.isFailover() {
		res.Failover = &FailoverSummary{Topology: sc.Failover, ReplicaAck: r.cfg.ReplicaAck, StallFor: millis(sc.StallFor), Planned: failovers}
		if r.cfg.ReplicaAck > 0 {
			res.Failover.ReplicaAckTimeout = millis(r.cfg.ReplicaAckTimeout)
		}
	}
	if reason := r.skipReason(sc); reason != "" {
		res.Status = StatusSkip
		res.Reasons = append(res.Reasons, reason)
		res.Store = "-"
		r.progress.done(sc.Name, res)
		return res
	}

	// The fenced store.
	if sc.SQLStore && r.cfg.Store == StoreRedis {
		res.Notes = append(res.Notes, sqlStoreNote(sc))
	}
	ns, scfg, store, teardown, err := r.setUpScenario(ctx, sc, res)
	if err != nil {
		return res.fail("%v", err)
	}
	defer teardown()
	keys := keysFor(ns, lockKey)

	// A fresh epoch and counter.
	if err := r.rdb.Set(ctx, keys.epoch, "1", 0).Err(); err != nil {
		return res.fail("setting up keys: %v", err)
	}

	// Failover scenarios: the lock's own replicated Redis.
	var bed testBed
	var lockCfg lockConfig
	if sc.isFailover() {
		var err error
		bed, err = startTestBed(sc.Failover)
		if err != nil {
			return res.fail("starting the replicated Redis: %v", err)
		}
		defer bed.close()
		r.progress.logf("%s: the lock lives on %s", sc.Name, bed.describe())
		lockCfg = bed.workerLock()
		lockCfg.ReplicaAck, lockCfg.ReplicaAckTimeout = r.cfg.ReplicaAck, r.cfg.ReplicaAckTimeout
	}

	if r.store != nil {
		lockCfg = lockConfig{Kind: backendLock, Backend: r.cfg.Backend.Name, Config: r.store.Config()}
	}

	// The workers.
	timeout := scenarioTimeout(sc, r.cfg.Workers, iterations, r.pauses(sc), r.kills(sc), failovers)
	msgs := make(chan message, 256)
	// Every worker connected, then started together; early: events other
	// than ready (none expected).
	procs, early, endWorkers, err := r.startWorkers(ctx, r.cfg.Workers, func(i int) workerConfig {
		return workerConfig{
			ID: i, RedisURL: r.redisURL, Namespace: ns, Key: lockKey, Scenario: sc.Name,
			Lease: sc.Lease, Hold: sc.Hold, Renew: sc.Renew, IgnoreLoss: sc.IgnoreLoss,
			Iterations: iterations, MaxWait: timeout, Store: scfg, Verbose: r.cfg.Verbose,
			Lock: lockCfg, UntilStopped: sc.isFailover(),
		}
	}, msgs)
	defer endWorkers()
	if err != nil {
		return res.fail("%v", err)
	}
	t0 := mono()
	for _, p := range procs {
		fmt.Fprintln(p.stdin, "go")
	}

	st := &live{total: r.cfg.Workers * iterations}
	var finished atomicInt
	finishedBy := make([]atomicInt, len(procs))
	ctl := &controller{
		r: r, sc: sc, ns: ns, keys: keys, procs: procs, t0: t0,
		finished: finished.Load, total: st.total,
		left:   func(w int) bool { return finishedBy[w].Load() < iterations },
		pauses: r.pauses(sc), kills: r.kills(sc),
		bed: bed, failovers: failovers,
	}
	ctlCtx, stopCtl := context.WithCancel(ctx)
	ctlDone := make(chan struct{})
	go func() {
		defer close(ctlDone)
		ctl.run(ctlCtx)
	}()

	c := &collector{st: st, recs: map[recKey]*iterRecord{}, doneWorkers: map[int]bool{}, finished: &finished, finishedBy: finishedBy, res: res}
	for _, m := range early {
		c.handle(m)
	}
	stopped := r.collect(ctx, sc, c, procs, msgs, timeout, started)
	recs, doneWorkers := c.recs, c.doneWorkers
	stopCtl()
	<-ctlDone
	end := mono()

	// What the store kept.
	in := analysisInput{
		sc: sc, workers: len(procs), iterations: iterations, t0: t0, end: end,
		recs: recs, killedAt: map[int]int64{}, doneWorkers: doneWorkers,
		pausesPlanned: ctl.pauses, killsPlanned: ctl.kills,
		pauses: ctl.pauseRecs, kills: ctl.killRecs, restart: ctl.restartRec, ctlErrs: ctl.errs,
		failoversPlanned: failovers, failovers: ctl.failoverRecs, replicaAck: r.cfg.ReplicaAck,
		stopped: stopped,
	}
	for _, p := range procs {
		if p.killed.Load() {
			in.killedAt[p.id] = p.killAt.Load()
		}
	}
	in.storeToken = storeToken(ctx, store, res)
	in.lockLeft = r.lockLeft(ctx, ns, keys, bed)
	analyze(res, in)
	res.Elapsed = millis(time.Since(started))
	r.progress.done(sc.Name, res)
	return res
}

// skipReason says why sc cannot run on these servers, or "".
func (r *runner) skipReason(sc Scenario) string {
	switch {
	case sc.Restart && r.srv == nil && r.store == nil:
		return "needs the demo's private redis-server (it kill -9s and restarts it); not done to an external Redis"
	case sc.isFailover() && r.srv == nil:
		return "runs only with the demo's private servers (it starts a replicated Redis of its own, kill -9s its masters, and keeps its checks on a private redis-server); skipped with an external Redis"
	case sc.isFailover() && sc.Failover == lockCluster && r.cfg.ReplicaAck > 1:
		return fmt.Sprintf("the Cluster has one replica per master: --replica-ack %d could never be acknowledged", r.cfg.ReplicaAck)
	}
	return ""
}

// sqlStoreNote says why sc's fenced store is SQLite, not Redis.
func sqlStoreNote(sc Scenario) string {
	if sc.isFailover() {
		return sc.Name + ": fenced store: SQLite instead of Redis, which a failover may roll back"
	}
	return "fenced store: SQLite instead of Redis, which the restart wipes"
}

// collector keeps what the workers report: the iterations, who finished,
// and the live counts. Only the run loop calls it.
type collector struct {
	st          *live
	recs        map[recKey]*iterRecord
	doneWorkers map[int]bool
	finished    *atomicInt
	finishedBy  []atomicInt
	res         *Result
}

// handle takes one event of a worker.
func (c *collector) handle(m message) {
	switch m.ev.Ev {
	case "step", "iter":
		if m.ev.Iter != nil {
			c.record(m.p.id, m.ev.Iter, m.ev.Ev == "iter")
		}
	case "done":
		c.doneWorkers[m.p.id] = true
	case "fatal":
		c.res.Reasons = append(c.res.Reasons, fmt.Sprintf("worker %d: %s", m.p.id, m.ev.Err))
	}
}

// record keeps the latest state of an iteration of worker w, and counts it
// once it entered and once it finished.
func (c *collector) record(w int, rec *iterRecord, finished bool) {
	st := c.st
	rec.Worker = w
	k := recKey{w, rec.Iter}
	if _, seen := c.recs[k]; !seen && rec.EnterRan {
		st.entered++
		if rec.EnterN != 1 {
			st.violations++
		}
		st.maxInside = max(st.maxInside, rec.EnterN)
	}
	c.recs[k] = rec
	if !finished {
		return
	}
	st.finished++
	c.finished.Store(st.finished)
	c.finishedBy[w].Add(1)
	if rec.ExitRan && rec.ExitN != 0 {
		st.violations++
	}
	for _, wr := range rec.Writes {
		if wr.Result == writeStale {
			st.stale++
		}
	}
}

// collect takes the workers' events until every worker has exited,
// stopping them at the timeout or when ctx ends, and returns why the run
// was cut short ("" if it was not).
func (r *runner) collect(ctx context.Context, sc Scenario, c *collector, procs []*proc, msgs <-chan message, timeout time.Duration, started time.Time) string {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(r.progress.interval())
	defer tick.Stop()
	st := c.st
	alive := len(procs)
	timedOut, interrupted := false, false
	stopped := ""
	for alive > 0 {
		select {
		case m := <-msgs:
			if m.exited {
				alive--
				if !c.doneWorkers[m.p.id] && !m.p.killed.Load() && !timedOut && !interrupted {
					c.res.Reasons = append(c.res.Reasons, fmt.Sprintf("worker %d exited early (%v); its stderr:\n%s",
						m.p.id, m.p.err, indent(m.p.stderr.String())))
				}
				continue
			}
			c.handle(m)
		case <-tick.C:
			r.progress.update(sc.Name, st, time.Since(started))
		case <-deadline.C:
			if !timedOut {
				timedOut = true
				stopped = fmt.Sprintf("timed out after %v with %d of %d iterations finished", timeout, st.finished, st.total)
				stopWorkers(procs)
			}
		case <-ctx.Done():
			if !interrupted {
				interrupted = true
				stopped = fmt.Sprintf("interrupted with %d of %d iterations finished", st.finished, st.total)
				stopWorkers(procs)
			}
		}
	}
	return stopped
}

// storeToken returns the token the fenced store holds at the end (0:
// none).
func storeToken(ctx context.Context, store *openedStore, res *Result) int64 {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, token, err := store.Read(sctx, lockKey)
	switch {
	case errors.Is(err, fence.ErrNotFound):
		return 0
	case err != nil:
		res.Notes = append(res.Notes, "could not read the store's final value: "+err.Error())
		return 0
	}
	return token
}

// lockLeft reports whether the lock is still held (a stuck lock) once
// every worker has ended.
func (r *runner) lockLeft(ctx context.Context, ns string, keys demoKeys, bed testBed) bool {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if r.store != nil {
		f, err := r.store.Fence(lctx, ns, lockKey)
		return err == nil && f != 0
	}
	lockRDB := redis.UniversalClient(r.rdb)
	if bed != nil {
		lockRDB = bed.client()
		defer lockRDB.Close()
	}
	n, err := lockRDB.Exists(lctx, keys.lock).Result()
	return err == nil && n > 0
}

// awaitReady waits until every worker has said it is ready, and returns
// the other events that came meanwhile (none are expected).
func awaitReady(ctx context.Context, procs []*proc, msgs <-chan message) ([]message, error) {
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	var early []message
	for ready := 0; ready < len(procs); {
		select {
		case m := <-msgs:
			switch {
			case m.exited:
				return nil, fmt.Errorf("worker %d exited before it was ready (%v); its stderr:\n%s", m.p.id, m.p.err, m.p.stderr)
			case m.ev.Ev == "ready":
				ready++
			case m.ev.Ev == "fatal":
				return nil, fmt.Errorf("worker %d: %s", m.p.id, m.ev.Err)
			default:
				early = append(early, m)
			}
		case <-timer.C:
			return nil, errors.New("workers not ready after 30s")
		case <-ctx.Done():
			return nil, errors.New("interrupted")
		}
	}
	return early, nil
}

// stopWorkers closes the workers' stdin (they stop, releasing their lock)
// and kills those still running a few seconds later.
func stopWorkers(procs []*proc) {
	for _, p := range procs {
		p.signal(syscall.SIGCONT)
		p.stdin.Close()
	}
	go func() {
		time.Sleep(3 * time.Second)
		for _, p := range procs {
			p.signal(syscall.SIGKILL)
		}
	}()
}

// storeFor returns the fenced store of sc and its name for the table.
// setUpScenario begins a scenario run: its namespace of keys on the demo's Redis
// (ns), and its fenced store, opened (scfg, store; res.Store names it).
// teardown, which the caller defers, drops the store's table (PostgreSQL),
// closes it, and removes every key of the namespace, so that nothing is
// left behind in a shared Redis; what it cannot remove is noted on res.
// When the store cannot be opened, the keys are removed at once and err
// says why.
func (r *runner) setUpScenario(ctx context.Context, sc Scenario, res *Result) (ns string, scfg storeConfig, store *openedStore, teardown func(), err error) {
	ns = fmt.Sprintf("fencelock-demo:%s:%s", r.runID, sc.Name)
	removeKeys := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := scanDelete(cctx, r.rdb, ns+":*"); err != nil {
			res.Notes = append(res.Notes, "could not remove the demo's keys: "+err.Error())
		}
	}
	scfg, res.Store = r.storeFor(sc, ns)
	store, err = openStore(ctx, scfg, r.rdb, true)
	if err != nil {
		removeKeys()
		return ns, scfg, nil, nil, fmt.Errorf("setting up the %s store: %v", scfg.Kind, err)
	}
	teardown = func() {
		if store.drop != nil && scfg.Kind == StorePostgres {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			store.drop(dctx)
			cancel()
		}
		store.close()
		removeKeys()
	}
	return ns, scfg, store, teardown, nil
}

func (r *runner) storeFor(sc Scenario, ns string) (storeConfig, string) {
	kind := r.cfg.Store
	if sc.SQLStore && kind == StoreRedis {
		return sqliteConfig(r.tmpDir, sc.Name), "sqlite*"
	}
	switch kind {
	case StoreSQLite:
		return sqliteConfig(r.tmpDir, sc.Name), StoreSQLite
	case StorePostgres:
		table := "fencelock_demo_" + r.runID + "_" + strings.ReplaceAll(sc.Name, "-", "_")
		return storeConfig{Kind: StorePostgres, DSN: r.pg.url, Table: table}, StorePostgres
	default:
		return storeConfig{Kind: StoreRedis, Prefix: ns + ":fenced"}, StoreRedis
	}
}

func (r *runner) pauses(sc Scenario) int {
	if sc.Pauses == 0 {
		return 0
	}
	if r.cfg.Pauses > 0 {
		return r.cfg.Pauses
	}
	return sc.Pauses
}

func (r *runner) failovers(sc Scenario) int {
	if !sc.isFailover() {
		return 0
	}
	if r.cfg.Failovers > 0 {
		return r.cfg.Failovers
	}
	return sc.Failovers
}

func (r *runner) kills(sc Scenario) int {
	if sc.Kills == 0 {
		return 0
	}
	n := sc.Kills
	if r.cfg.Kills > 0 {
		n = r.cfg.Kills
	}
	return min(n, r.cfg.Workers-1)
}

// scenarioTimeout bounds a scenario generously; it only ends runs that hang.
func scenarioTimeout(sc Scenario, workers, iterations, pauses, kills, failovers int) time.Duration {
	per := sc.Hold + 100*time.Millisecond
	if sc.IgnoreLoss {
		per = max(per, sc.Lease+100*time.Millisecond)
	}
	d := 60*time.Second + 3*time.Duration(workers*iterations)*per
	d += time.Duration(pauses) * (sc.PauseFor() + 2*sc.Lease)
	d += time.Duration(kills) * 2 * sc.Lease
	// A failover: the stall, a promotion, a rejoin, a round of hand-offs.
	d += time.Duration(failovers) * (sc.StallFor + 2*sc.Lease + 60*time.Second)
	return d
}

func indent(s string) string {
	if s == "" {
		return "    (nothing)"
	}
	out := ""
	for _, l := range splitLines(s) {
		out += "    " + l + "\n"
	}
	return out[:len(out)-1]
}
