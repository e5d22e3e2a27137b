package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/redis/go-redis/v9"
)

// The failover scenarios put the lock on a replicated Redis the demo starts
// (a Sentinel group, or a Cluster with a replica per master) and kill -9 the
// master that has it, N times, while a worker holds the lock:
//
//  1. The master asks for a victim (the "want" key on the referee); the next
//     worker to enter claims it and holds on past its hold time.
//  2. It stalls the replicas of the lock's master (SIGSTOP, replication link
//     cut): from now on the lock's writes (the victim's renewals) are on
//     that master only.
//  3. After StallFor, it kill -9s that master, resumes the replicas and
//     waits until one of them is promoted; then it restarts the old master,
//     which rejoins as a replica.
//  4. Once the victim's local lease deadline as of the kill has passed, it
//     lets the victim go ("release FENCE" on its stdin). A victim that still
//     holds then kept the lock through the failover (a renewal reached the
//     promoted master in time).
//
// The promoted replica has the lock as it was when the replicas were
// stalled. Without replica acknowledgement the victim's renewals in the
// stall counted, so it believes in a lease that the new master ends
// earlier: if another worker acquires the lock on the new master before the
// victim hears of it, the lock was lost silently. With
// redisbackend.WithReplicaAck, renewals no replica acknowledged do not
// count, so the victim's local deadline stays where the replicas have the
// lease, and it is told (ErrLost) before the new master can hand the lock
// out.

// Bounds of one failover's steps; they only end runs that hang.
const (
	victimTimeout   = 30 * time.Second // until a worker enters and claims the victim's role
	failoverTimeout = 60 * time.Second // kill -9 -> a replica promoted
	rejoinTimeout   = 90 * time.Second // promotion -> the old master a synced replica again
)

// nextAcquireBound is how soon after a kill -9 some worker must have the
// lock again: a failover (2-3 s here, idle or under stress-ng --cpu 2) and,
// when the acknowledgements asked for need it, the old master's rejoin (a
// Cluster's promoted replica has no replica of its own until then; with
// --replica-ack 2 the Sentinel group's new master needs both). Measured:
// 2.1-3.6 s, and up to 4.9 s with --replica-ack 2.
const nextAcquireBound = 10 * time.Second

// sentinelMaster is the name the demo's Sentinel group monitors its master
// under.
const sentinelMaster = "fencelock-demo"

// testBed is the replicated Redis of a failover scenario.
type testBed interface {
	describe() string
	// workerLock is where the workers find the lock.
	workerLock() lockConfig
	// client returns a client of the lock's Redis, for the master's checks.
	client() redis.UniversalClient
	// stall makes the replicas of the master of key lag from now on.
	stall(key string) error
	resume() error
	// kill kill -9s the master of key.
	kill(key string) (*redisserver.Server, error)
	waitFailover(old *redisserver.Server, timeout time.Duration) (*redisserver.Server, error)
	// rejoin restarts old and waits until it is a synced replica and the
	// whole test bed is healthy.
	rejoin(old *redisserver.Server, timeout time.Duration) error
	close() error
}

func startTestBed(kind string) (testBed, error) {
	switch kind {
	case lockSentinel:
		g, err := redisserver.StartSentinelGroup(sentinelMaster, redisserver.SentinelGroupOptions{})
		if err != nil {
			return nil, err
		}
		return sentinelBed{g}, nil
	case lockCluster:
		c, err := redisserver.StartClusterWithReplicas(3, 1, redisserver.Options{})
		if err != nil {
			return nil, err
		}
		return clusterBed{c}, nil
	}
	return nil, fmt.Errorf("demo: unknown failover test bed %q", kind)
}

type sentinelBed struct{ g *redisserver.SentinelGroup }

func (b sentinelBed) describe() string {
	master, _ := b.g.MasterAddr()
	return fmt.Sprintf("a Sentinel group (master %s, 2 replicas, 3 sentinels, quorum 2)", master)
}
func (b sentinelBed) workerLock() lockConfig {
	return lockConfig{Kind: lockSentinel, MasterName: b.g.Name(), Addrs: b.g.SentinelAddrs()}
}
func (b sentinelBed) client() redis.UniversalClient {
	return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: b.g.Name(), SentinelAddrs: b.g.SentinelAddrs()})
}
func (b sentinelBed) stall(string) error { _, err := b.g.StallReplicas(); return err }
func (b sentinelBed) resume() error      { return b.g.ResumeReplicas() }
func (b sentinelBed) kill(string) (*redisserver.Server, error) {
	return b.g.KillMaster()
}
func (b sentinelBed) waitFailover(old *redisserver.Server, d time.Duration) (*redisserver.Server, error) {
	return b.g.WaitFailover(old, d)
}
func (b sentinelBed) rejoin(old *redisserver.Server, d time.Duration) error {
	return b.g.Rejoin(old, d)
}
func (b sentinelBed) close() error { return b.g.Close() }

type clusterBed struct{ c *redisserver.Cluster }

func (b clusterBed) describe() string {
	return fmt.Sprintf("a Cluster (3 masters, a replica each: %s)", strings.Join(b.c.Addrs(), " "))
}
func (b clusterBed) workerLock() lockConfig {
	return lockConfig{Kind: lockCluster, Addrs: b.c.Addrs()}
}
func (b clusterBed) client() redis.UniversalClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: b.c.Addrs()})
}
func (b clusterBed) stall(key string) error {
	m, err := b.c.MasterOf(key)
	if err != nil {
		return err
	}
	_, err = b.c.StallReplicasOf(m)
	return err
}
func (b clusterBed) resume() error { return b.c.ResumeReplicas() }
func (b clusterBed) kill(key string) (*redisserver.Server, error) {
	return b.c.KillMasterOf(key)
}
func (b clusterBed) waitFailover(old *redisserver.Server, d time.Duration) (*redisserver.Server, error) {
	return b.c.WaitFailover(old, d)
}
func (b clusterBed) rejoin(old *redisserver.Server, d time.Duration) error { return b.c.Rejoin(old, d) }
func (b clusterBed) close() error                                          { return b.c.Close() }

// failoverRec is one failover, as the master drove it. Times are mono().
type failoverRec struct {
	Victim    holderValue
	Stalled   int64 // the replicas were stalled
	Killed    int64 // kill -9 of the lock's master sent
	Old       string
	Promoted  int64 // the promotion was seen (0: not within failoverTimeout)
	NewMaster string
	LetGo     int64 // the victim was sent "release"
	Rejoined  int64 // the old master was a synced replica again (0: not seen)
}

// runFailovers drives the failover scenario: c.failovers failovers, one
// after the other, then a round of iterations on the healed test bed, and
// then "stop" to every worker. If a failover goes wrong, the workers are
// stopped at once: the test bed may not serve the lock any more.
func (c *controller) runFailovers(ctx context.Context) {
	for k := range c.failovers {
		if err := c.failover(ctx, k); err != nil {
			if ctx.Err() == nil {
				c.errorf("failover %d: %v", k+1, err)
				stopWorkers(c.procs)
			}
			return
		}
	}
	defer func() {
		for _, p := range c.procs {
			p.send("stop")
		}
	}()
	// Every worker gets the lock about once more after the last one.
	f0 := c.finished()
	deadline := time.Now().Add(20 * time.Second)
	for c.finished() < f0+len(c.procs) && time.Now().Before(deadline) {
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return
		}
	}
}

// failover is one failover under a victim (see the top of this file).
func (c *controller) failover(ctx context.Context, k int) (err error) {
	rdb := c.r.rdb
	if err := rdb.Del(ctx, c.keys.victim).Err(); err != nil {
		return err
	}
	if err := rdb.Set(ctx, c.keys.want, k+1, 0).Err(); err != nil {
		return err
	}
	var h holderValue
	deadline := time.Now().Add(victimTimeout)
	for {
		s, err := rdb.Get(ctx, c.keys.victim).Result()
		if err != nil && !errors.Is(err, redis.Nil) && ctx.Err() != nil {
			return err
		}
		var ok bool
		if h, ok = parseHolder(s); ok {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no worker entered within %v", victimTimeout)
		}
		if !sleepCtx(ctx, 2*time.Millisecond) {
			return ctx.Err()
		}
	}
	if h.Worker < 0 || h.Worker >= len(c.procs) || c.procs[h.Worker].pid != h.Pid {
		return fmt.Errorf("the victim key names an unknown worker: %+v", h)
	}
	p := c.procs[h.Worker]
	rec := failoverRec{Victim: h}
	letGo := func() {
		if rec.LetGo == 0 {
			rec.LetGo = mono()
			p.send(fmt.Sprintf("release %d", h.Fence))
		}
	}
	defer func() {
		letGo()
		if rec.Killed != 0 {
			c.mu.Lock()
			c.failoverRecs = append(c.failoverRecs, rec)
			c.mu.Unlock()
		}
	}()

	rec.Stalled = mono()
	if err := c.bed.stall(c.keys.lock); err != nil {
		return fmt.Errorf("stalling the replicas: %w", err)
	}
	if !sleepCtx(ctx, c.sc.StallFor) {
		c.bed.resume()
		return ctx.Err()
	}
	rec.Killed = mono()
	old, err := c.bed.kill(c.keys.lock)
	if err != nil {
		rec.Killed = 0
		c.bed.resume()
		return fmt.Errorf("kill -9 of the lock's master: %w", err)
	}
	rec.Old = old.Addr()
	c.r.progress.logf("%s: failover %d: worker %d holds fence %d; replicas stalled %v, then kill -9 master %s",
		c.sc.Name, k+1, h.Worker, h.Fence, time.Duration(rec.Killed-rec.Stalled).Round(time.Millisecond), rec.Old)
	if err := c.bed.resume(); err != nil {
		return fmt.Errorf("resuming the replicas: %w", err)
	}
	promoted, err := c.bed.waitFailover(old, failoverTimeout)
	if err != nil {
		return err
	}
	rec.Promoted, rec.NewMaster = mono(), promoted.Addr()
	c.r.progress.logf("%s: failover %d: %s promoted %v after the kill", c.sc.Name, k+1, rec.NewMaster,
		time.Duration(rec.Promoted-rec.Killed).Round(time.Millisecond))

	type rejoinResult struct {
		at  int64
		err error
	}
	rejoined := make(chan rejoinResult, 1)
	go func() {
		err := c.bed.rejoin(old, rejoinTimeout)
		rejoined <- rejoinResult{mono(), err}
	}()
	// The victim's local deadline, set by a renewal sent before the kill,
	// has passed by then: if it still holds, a renewal on the promoted
	// master kept the lock.
	at := max(rec.Promoted, rec.Killed+int64(c.sc.Lease)) + int64(200*time.Millisecond)
	sleepCtx(ctx, time.Duration(at-mono()))
	letGo()
	select {
	case rj := <-rejoined:
		if rj.err != nil {
			return fmt.Errorf("rejoining %s: %w", rec.Old, rj.err)
		}
		rec.Rejoined = rj.at
	case <-ctx.Done():
		return ctx.Err() // interrupted: the test bed is closed next, which ends the rejoin
	}
	c.r.progress.logf("%s: failover %d: %s rejoined as a replica %v after the kill", c.sc.Name, k+1, rec.Old,
		time.Duration(rec.Rejoined-rec.Killed).Round(time.Millisecond))
	return ctx.Err()
}

// Outcomes of a failover for its victim.
const (
	failoverLost = "lost silently" // another worker acquired the lock while the victim still believed it held it
	failoverTold = "told"          // the victim was told (ErrLost) before anyone else acquired the lock
	failoverKept = "kept"          // the victim kept the lock through the failover
)

// analyzeFailovers judges a failover scenario: what happened to each
// victim, the fences, the ghost-lock time after releases and how soon the
// lock was usable after each kill.
func analyzeFailovers(res *Result, in analysisInput, recs []*iterRecord) {
	if res.Failover == nil {
		res.Failover = &FailoverSummary{Topology: in.sc.Failover, StallFor: millis(in.sc.StallFor)}
	}
	fs := res.Failover
	fs.Planned, fs.ReplicaAck = in.failoversPlanned, in.replicaAck
	acq := byAcquired(recs)
	checkFenceOrder(res, in, acq)
	measureGhosts(fs, acq)
	excusedFrom := failoverEvents(res, in, recs, acq)
	judgeFailoverCounts(res, in)
	if fs.ReplicaAck > 0 {
		judgeReplicaAck(res)
		return
	}
	// The victims' holds may overlap others from the stall on: that is
	// the loss being shown. Nothing else may.
	excuseOverlap(recs, excusedFrom).judge(res, "a failover victim's hold from the stall on")
	judgeNoReplicaAck(res)
}

// byAcquired returns the acquisitions in the order their Acquire returned.
func byAcquired(recs []*iterRecord) []*iterRecord {
	var acq []*iterRecord
	for _, r := range recs {
		if r.Acquired > 0 {
			acq = append(acq, r)
		}
	}
	slices.SortFunc(acq, func(a, b *iterRecord) int { return cmp.Compare(a.Acquired, b.Acquired) })
	return acq
}

// checkFenceOrder counts fence regressions, a fence not above every fence
// handed out before, and fails the run with the first three.
func checkFenceOrder(res *Result, in analysisInput, acq []*iterRecord) {
	fs := res.Failover
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
}

// measureGhosts measures the ghost lock: a release returned, and the next
// acquire (by a worker already waiting) came only that much later.
func measureGhosts(fs *FailoverSummary, acq []*iterRecord) {
	var ghosts []float64
	for i := 1; i < len(acq); i++ {
		prev, next := acq[i-1], acq[i]
		if prev.Released && prev.ReleaseEnd > 0 && next.AcquireStart < prev.ReleaseEnd {
			ghosts = append(ghosts, float64(nanos(max(next.Acquired-prev.ReleaseEnd, 0))))
		}
	}
	fs.Releases = len(ghosts)
	fs.GhostP50, fs.GhostMax = Millis(percentile(ghosts, 50)), Millis(percentile(ghosts, 100))
}

// failoverEvents describes each failover and returns the victims' holds,
// excused from the stall on.
func failoverEvents(res *Result, in analysisInput, recs, acq []*iterRecord) map[*iterRecord]int64 {
	fs := res.Failover
	excusedFrom := map[*iterRecord]int64{}
	var nexts []float64
	for k, f := range in.failovers {
		fr := FailoverResult{
			N: k + 1, Victim: f.Victim.Worker, Fence: f.Victim.Fence, Old: f.Old, NewMaster: f.NewMaster,
			At: nanos(f.Killed - in.t0), Stalled: nanos(f.Killed - f.Stalled),
			Promotion: sinceOrNever(f.Promoted, f.Killed), Rejoin: sinceOrNever(f.Rejoined, f.Killed),
			TakenBy: -1, TakenAfter: -1, NextAcquire: -1,
		}
		if r := firstAcquiredAfter(acq, f.Killed); r != nil {
			fr.NextAcquire = nanos(r.Acquired - f.Killed)
			nexts = append(nexts, float64(fr.NextAcquire))
		}
		v := victimRecord(recs, f.Victim)
		if v == nil || v.Acquired == 0 {
			fr.Outcome = "unknown"
			res.Reasons = append(res.Reasons, fmt.Sprintf("failover %d: the victim's iteration (worker %d, fence %d) was not reported", k+1, f.Victim.Worker, f.Victim.Fence))
			fs.Events = append(fs.Events, fr)
			continue
		}
		excusedFrom[v] = max(f.Stalled, v.Acquired)
		judgeVictim(fs, &fr, v, acq, f.Killed)
		fs.Events = append(fs.Events, fr)
	}
	fs.Done = len(fs.Events)
	fs.NextAcquireMin, fs.NextAcquireMedian, fs.NextAcquireMax = -1, -1, -1
	if len(nexts) > 0 {
		fs.NextAcquireMin = Millis(percentile(nexts, 0))
		fs.NextAcquireMedian = Millis(percentile(nexts, 50))
		fs.NextAcquireMax = Millis(percentile(nexts, 100))
	}
	return excusedFrom
}

// firstAcquiredAfter returns the first of acq (by Acquired) that returned
// after t, or nil.
func firstAcquiredAfter(acq []*iterRecord, t int64) *iterRecord {
	for _, r := range acq {
		if r.Acquired > t {
			return r
		}
	}
	return nil
}

// victimRecord returns the (last) iteration of the failover's victim, or
// nil.
func victimRecord(recs []*iterRecord, victim holderValue) *iterRecord {
	var v *iterRecord
	for _, r := range recs {
		if r.Worker == victim.Worker && r.Fence == victim.Fence {
			v = r
		}
	}
	return v
}

// judgeVictim decides what the failover did to its victim v: another
// worker acquired the lock while v still believed it held it (lost
// silently), v was told first, or v kept the lock.
func judgeVictim(fs *FailoverSummary, fr *FailoverResult, v *iterRecord, acq []*iterRecord, killed int64) {
	var taker *iterRecord
	for _, r := range acq {
		if r != v && r.Acquired > v.Acquired && r.Acquired < v.Exited {
			taker = r
			break
		}
	}
	if taker != nil {
		fr.TakenBy, fr.TakenFence, fr.TakenAfter = taker.Worker, taker.Fence, nanos(taker.Acquired-killed)
	}
	if v.ToldAt > 0 {
		fr.Told, fr.ToldAfter = true, nanos(v.ToldAt-killed)
		fr.ToldHow = lossKind(v.LostErr)
	}
	switch {
	case taker != nil && (v.ToldAt == 0 || v.ToldAt > taker.Acquired):
		fr.Outcome = failoverLost
		fs.LostSilently++
	case v.ToldAt > 0:
		fr.Outcome = failoverTold
		fs.Told++
	default:
		fr.Outcome = failoverKept
		fs.Kept++
	}
}

// judgeFailoverCounts fails a run that did fewer failovers than planned, or
// whose lock was not acquired soon enough after a kill, and describes each
// failover.
func judgeFailoverCounts(res *Result, in analysisInput) {
	fs := res.Failover
	if fs.Done < fs.Planned && in.stopped == "" {
		res.Reasons = append(res.Reasons, fmt.Sprintf("%d of %d failovers done", fs.Done, fs.Planned))
	}
	if fs.Done == 0 && in.stopped == "" {
		res.Reasons = append(res.Reasons, "no failover was done")
	}
	bound := millis(nextAcquireBound)
	for _, e := range fs.Events {
		if e.NextAcquire < 0 {
			res.Reasons = append(res.Reasons, fmt.Sprintf("failover %d: no worker acquired the lock after the kill -9", e.N))
		} else if e.NextAcquire > bound {
			res.Reasons = append(res.Reasons, fmt.Sprintf("failover %d: the next acquire came %v after the kill -9, not within %v", e.N, e.NextAcquire, bound))
		}
		res.Notes = append(res.Notes, failoverNote(res.Scenario, e))
	}
}

// judgeReplicaAck: with --replica-ack no lock may be lost silently and no
// two holders may overlap.
func judgeReplicaAck(res *Result) {
	fs := res.Failover
	for _, e := range fs.Events {
		if e.Outcome == failoverLost {
			res.Reasons = append(res.Reasons, fmt.Sprintf("failover %d: lock LOST SILENTLY with --replica-ack %d: worker %d (fence %d) still believed it held the lock when worker %d acquired fence %d, %v after the kill -9",
				e.N, fs.ReplicaAck, e.Victim, e.Fence, e.TakenBy, e.TakenFence, e.TakenAfter))
		}
	}
	if res.Violations > 0 {
		res.Reasons = append(res.Reasons, fmt.Sprintf("%d violations of mutual exclusion (the inside counter)", res.Violations))
	}
	if res.MaxConcurrent > 1 {
		res.Reasons = append(res.Reasons, fmt.Sprintf("%d holders overlapped in time (CLOCK_MONOTONIC intervals)", res.MaxConcurrent))
	}
	if fs.LostSilently == 0 && failoverSafe(res) && res.MaxConcurrent <= 1 {
		res.Verdict = fmt.Sprintf("--replica-ack %d: no lock lost silently in %s (holders told %d, kept %d), never two holders; stale writes refused %d, accepted 0",
			fs.ReplicaAck, plural(fs.Done, "failover"), fs.Told, fs.Kept, res.StaleAttempted)
	}
}

// judgeNoReplicaAck gives the verdict without --replica-ack, where a lock
// lost silently is what the scenario shows, provided the fences kept the
// data safe.
func judgeNoReplicaAck(res *Result) {
	fs := res.Failover
	if !failoverSafe(res) {
		return
	}
	if fs.LostSilently == 0 {
		res.Verdict = fmt.Sprintf("no lock lost silently in %s this time (no --replica-ack: holders told %d, kept %d); stale writes refused %d, accepted 0, fences never went backwards",
			plural(fs.Done, "failover"), fs.Told, fs.Kept, res.StaleAttempted)
		return
	}
	fenced := fmt.Sprintf("the fence refused every stale write (%d)", res.StaleAttempted)
	if res.StaleAttempted == 0 {
		fenced = "no stale write was attempted"
	}
	res.Verdict = fmt.Sprintf("lock lost silently in %d of %d failovers (no --replica-ack); %s, fences never went backwards",
		fs.LostSilently, fs.Done, fenced)
}

// failoverSafe: the store accepted no stale write and fences never went
// backwards.
func failoverSafe(res *Result) bool {
	return res.StaleAccepted == 0 && res.Failover.FenceRegressions == 0
}

// plural formats n things.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// lossKind names how a holder was told of a loss, from the lock's error.
func lossKind(err string) string {
	switch {
	case strings.Contains(err, "deadline"):
		return "lease deadline"
	case strings.Contains(err, "renewal found"):
		return "renewal found it gone"
	case err == "":
		return ""
	default:
		return "lost"
	}
}

// failoverNote describes one failover; times are from the kill -9.
func failoverNote(scenario string, e FailoverResult) string {
	var what string
	switch e.Outcome {
	case failoverLost:
		told := fmt.Sprintf("worker %d never told before it released", e.Victim)
		if e.Told {
			told = fmt.Sprintf("worker %d told at %v (%s)", e.Victim, e.ToldAfter, e.ToldHow)
		}
		what = fmt.Sprintf("LOST SILENTLY: worker %d acquired fence %d at %v, %s", e.TakenBy, e.TakenFence, e.TakenAfter, told)
	case failoverTold:
		if e.ToldAfter < 0 {
			what = fmt.Sprintf("worker %d told %v before the kill (%s)", e.Victim, -e.ToldAfter, e.ToldHow)
		} else {
			what = fmt.Sprintf("worker %d told at %v (%s)", e.Victim, e.ToldAfter, e.ToldHow)
		}
		if e.TakenBy >= 0 {
			what += fmt.Sprintf(", then worker %d acquired fence %d at %v", e.TakenBy, e.TakenFence, e.TakenAfter)
		}
	case failoverKept:
		what = fmt.Sprintf("worker %d kept the lock", e.Victim)
	default:
		what = e.Outcome
	}
	return fmt.Sprintf("%s: failover %d at %v: kill -9 of master %s under worker %d (fence %d), replicas stalled %v before; after the kill: %s promoted at %v, old master rejoined at %v, %s; next acquire at %v",
		scenario, e.N, e.At, e.Old, e.Victim, e.Fence, e.Stalled, e.NewMaster, showTakeover(e.Promotion), showTakeover(e.Rejoin), what, showTakeover(e.NextAcquire))
}
