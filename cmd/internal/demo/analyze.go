package demo

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// analysisInput is everything the master gathered about one scenario run.
type analysisInput struct {
	sc          Scenario
	workers     int
	iterations  int
	t0, end     int64 // mono: start and end of the run
	recs        map[recKey]*iterRecord
	killedAt    map[int]int64 // worker -> mono time of its kill -9
	doneWorkers map[int]bool  // workers that reported finishing every iteration

	pausesPlanned, killsPlanned int
	pauses                      []pauseRec
	kills                       []killRec
	restart                     *restartRec
	failoversPlanned            int
	failovers                   []failoverRec
	replicaAck                  int // failover scenarios: --replica-ack
	ctlErrs                     []string

	stopped string // why the run was cut short (Ctrl-C, timeout); "" if it was not

	fair *fairObserved // the fair scenario's runs and kill

	storeToken int64 // the token the store holds at the end (0: none)
	lockLeft   bool  // the lock key still existed after every worker had ended
}

// analyze fills res from in: the counts, the overlap of hold intervals, the
// stale writes, the hand-off latencies, and the verdict against the
// scenario's expectation. It measures what every scenario has, lets the
// scenario excuse the overlap its disruption explains, then checks what
// every scenario must show and what this one must.
func analyze(res *Result, in analysisInput) {
	res.Reasons = append(res.Reasons, in.ctlErrs...)
	a := &analysis{res: res, in: in, sc: in.sc, recs: sortedRecords(in.recs), total: in.workers * in.iterations}
	a.finishRecords()
	a.measureHolds()
	a.checkFences()
	a.checkWrites()
	a.measureHandoffs()
	a.pauseResults()
	a.killResults()
	a.restartResult()
	check := scenarioChecks[a.sc.Name]
	a.excusedFrom = map[*iterRecord]int64{}
	if check.excuse != nil {
		check.excuse(a)
	}
	a.ex = excuseOverlap(a.recs, a.excusedFrom)
	a.checkEveryScenario()
	if check.judge != nil {
		check.judge(a)
	}
	a.cutShort()
}

// analysis is one run of analyze: its input, the result it fills and what
// the steps share.
type analysis struct {
	res   *Result
	in    analysisInput
	sc    Scenario
	total int // iterations planned

	recs        []*iterRecord         // by worker, then iteration
	acq         []*iterRecord         // acquisitions, by fence
	byFence     map[int64]*iterRecord // acquisitions
	completedBy map[int]int           // worker -> iterations completed
	firstErr    string                // the first failed iteration's error

	excusedFrom map[*iterRecord]int64 // holds whose overlap the disruption explains, from when
	ex          overlapLeft           // the overlap left once that is excused
}

// scenarioCheck is what one scenario adds to the common analysis: the
// overlap its disruption excuses, and what it must show.
type scenarioCheck struct {
	excuse func(*analysis)
	judge  func(*analysis)
}

// scenarioChecks maps a scenario's name to its checks.
var scenarioChecks = map[string]scenarioCheck{
	"mutex":            {judge: (*analysis).judgeMutex},
	"renew":            {judge: (*analysis).judgeMutex},
	"expiry":           {judge: (*analysis).judgeExpiry},
	"pause":            {excuse: (*analysis).excusePause, judge: (*analysis).judgePause},
	"crash":            {judge: (*analysis).judgeCrash},
	"fair":             {judge: (*analysis).judgeFair},
	"failover":         {judge: (*analysis).judgeFailover},
	"cluster-failover": {judge: (*analysis).judgeFailover},
	"restart":          {excuse: (*analysis).excuseRestart, judge: (*analysis).judgeRestart},
}

func (a *analysis) reason(s string) { a.res.Reasons = append(a.res.Reasons, s) }
func (a *analysis) note(s string)   { a.res.Notes = append(a.res.Notes, s) }

// sortedRecords returns the iterations, by worker then iteration.
func sortedRecords(m map[recKey]*iterRecord) []*iterRecord {
	recs := make([]*iterRecord, 0, len(m))
	for _, r := range m {
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b *iterRecord) int {
		return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Iter, b.Iter))
	})
	return recs
}

// finishRecords finishes the iterations a kill (or a failure) cut short and
// counts the outcomes.
func (a *analysis) finishRecords() {
	a.completedBy = map[int]int{}
	for _, r := range a.recs {
		a.finishRecord(r)
		a.count(r)
	}
}

// finishRecord gives r an outcome and an end if it has none.
func (a *analysis) finishRecord(r *iterRecord) {
	if r.Outcome == "" {
		if at, ok := a.in.killedAt[r.Worker]; ok {
			r.Outcome = outcomeKilled
			if r.Exited == 0 {
				r.Exited = at
			}
		} else {
			r.Outcome, r.Err = outcomeFailed, "the worker never finished the iteration"
		}
	}
	if r.Acquired > 0 && r.Exited == 0 {
		r.Exited = a.in.end
	}
}

// count adds r to the result's counts.
func (a *analysis) count(r *iterRecord) {
	res := a.res
	if r.EnterRan {
		res.Entered++
	}
	res.Violations += len(counterViolations(r))
	if r.LostBeforeRelease {
		res.LossSignals++
	}
	switch r.Outcome {
	case outcomeCompleted:
		res.Completed++
		a.completedBy[r.Worker]++
	case outcomeInterrupted:
		res.Interrupted++
	case outcomeKilled:
		res.Killed++
	default:
		res.Failed++
		if a.firstErr == "" {
			a.firstErr = fmt.Sprintf("worker %d iteration %d: %s", r.Worker, r.Iter, r.Err)
		}
	}
}

// measureHolds finds how many hold intervals [Acquire returned, Release
// called], on the system-wide monotonic clock, overlapped at most.
func (a *analysis) measureHolds() {
	var ivs []interval
	for _, r := range a.recs {
		if r.Acquired > 0 {
			ivs = append(ivs, interval{r.Acquired, r.Exited})
		}
	}
	a.res.MaxConcurrent = maxOverlap(ivs)
}

// checkFences orders the acquisitions by fence and fails a fence given
// twice.
func (a *analysis) checkFences() {
	for _, r := range a.recs {
		if r.Fence > 0 {
			a.acq = append(a.acq, r)
		}
	}
	acq := a.acq
	slices.SortFunc(acq, func(a, b *iterRecord) int { return cmp.Compare(a.Fence, b.Fence) })
	a.res.Acquisitions = len(acq)
	if len(acq) > 0 {
		a.res.FenceMin, a.res.FenceMax = acq[0].Fence, acq[len(acq)-1].Fence
	}
	for i := 1; i < len(acq); i++ {
		if acq[i].Fence == acq[i-1].Fence {
			a.reason(fmt.Sprintf("fence %d was given to two acquisitions (workers %d and %d)",
				acq[i].Fence, acq[i-1].Worker, acq[i].Worker))
		}
	}
	a.byFence = map[int64]*iterRecord{}
	for _, r := range acq {
		a.byFence[r.Fence] = r
	}
}

// checkWrites finds which writes were stale, whether the store accepted
// any of them, and whether the store ended with the newest fence.
func (a *analysis) checkWrites() {
	res := a.res
	var writes []writeRecord
	for _, r := range a.recs {
		writes = append(writes, r.Writes...)
	}
	ws := staleWrites(writes)
	res.Writes, res.StaleAttempted, res.StaleAccepted, res.WriteErrors = len(writes), ws.attempted, ws.accepted, ws.errors
	if ws.unexplained > 0 {
		a.note(fmt.Sprintf("%d writes were refused though no newer accepted write was seen before they ended (a write the master did not hear of?)", ws.unexplained))
	}
	if ws.maxAccepted == 0 || a.in.storeToken == 0 {
		return
	}
	switch {
	case a.in.storeToken < ws.maxAccepted:
		a.reason(fmt.Sprintf("the store ended with fence %d though it accepted fence %d", a.in.storeToken, ws.maxAccepted))
	case a.in.storeToken > ws.maxAccepted:
		a.note(fmt.Sprintf("the store ended with fence %d, newer than any accepted write reported (%d)", a.in.storeToken, ws.maxAccepted))
	}
}

// measureHandoffs measures each hand-off: a release, then the next fence's
// acquisition.
func (a *analysis) measureHandoffs() {
	var handoffs []float64
	for i := 1; i < len(a.acq); i++ {
		prev, next := a.acq[i-1], a.acq[i]
		if prev.Released && prev.ReleaseStart > 0 && next.Acquired > prev.ReleaseStart {
			handoffs = append(handoffs, float64(nanos(next.Acquired-prev.ReleaseStart)))
		}
	}
	a.res.Handoffs = len(handoffs)
	a.res.HandoffP50, a.res.HandoffP99 = Millis(percentile(handoffs, 50)), Millis(percentile(handoffs, 99))
}

// takeover returns how long after at the first acquisition with a fence
// above f returned, and that acquisition, or -1 and nil.
func (a *analysis) takeover(f int64, at int64) (Millis, *iterRecord) {
	i, _ := slices.BinarySearchFunc(a.acq, f+1, func(r *iterRecord, f int64) int { return cmp.Compare(r.Fence, f) })
	if i < len(a.acq) && a.acq[i].Acquired > 0 {
		return nanos(a.acq[i].Acquired - at), a.acq[i]
	}
	return -1, nil
}

// pauseResults describes each pause: when the lock was free and taken
// over, whether its holder was told, and its writes after it resumed.
func (a *analysis) pauseResults() {
	for _, p := range a.in.pauses {
		pr := PauseResult{Worker: p.Worker, Fence: p.Fence, At: nanos(p.Start - a.in.t0), Stopped: nanos(p.End - p.Start), Free: sinceOrNever(p.Free, p.Start)}
		var next *iterRecord
		pr.Takeover, next = a.takeover(p.Fence, p.Start)
		if next != nil && next.Worker == p.Worker {
			pr.Takeover = -1 // not another worker
		}
		if r := a.byFence[p.Fence]; r != nil {
			pr.LossSignal = r.LostBeforeRelease || r.LostAtEnd
			pr.LateWrites, pr.LateRejected = lateWrites(r, p.End)
		}
		a.res.Pauses = append(a.res.Pauses, pr)
	}
}

// lateWrites counts the writes of r that started after resumed, and how
// many of them the store refused as stale.
func lateWrites(r *iterRecord, resumed int64) (late, rejected int) {
	for _, w := range r.Writes {
		if w.Start > resumed {
			late++
			if w.Result == writeStale {
				rejected++
			}
		}
	}
	return late, rejected
}

// killResults describes each kill -9 of a worker.
func (a *analysis) killResults() {
	for _, k := range a.in.kills {
		kr := KillResult{Worker: k.Worker, Fence: k.Fence, At: nanos(k.At - a.in.t0), Held: k.HeldAtKill, Free: sinceOrNever(k.Free, k.At), Takeover: -1}
		if k.HeldAtKill {
			kr.Takeover, _ = a.takeover(k.Fence, k.At)
		}
		a.res.Kills = append(a.res.Kills, kr)
	}
}

// restartResult describes the restart of the servers, if there was one:
// whether the lock held across it was kept, and the fences on both sides.
func (a *analysis) restartResult() {
	rs := a.in.restart
	if rs == nil {
		return
	}
	rr := &RestartResult{At: nanos(rs.Killed - a.in.t0), Down: nanos(rs.Up - rs.Killed), What: rs.What, HolderFence: rs.HolderFence, HeldAfter: rs.HeldAfter}
	if r := a.byFence[rs.HolderFence]; r != nil && rs.HolderFence != 0 {
		judgeKept(rr, r, rs)
	}
	for _, r := range a.acq {
		if r.Acquired > 0 && r.Acquired < rs.Killed {
			rr.FenceBefore = max(rr.FenceBefore, r.Fence)
		}
		if r.Acquired > rs.Up && (rr.FenceAfter == 0 || r.Fence < rr.FenceAfter) {
			rr.FenceAfter = r.Fence
		}
	}
	a.res.Restart = rr
}

// judgeKept decides whether r, the hold at the restart, kept its lock:
// never told of a loss, and the lock still had it when the servers answered
// again, or its holder released it normally (or could not reach the
// servers to release it: an outage, which the background release finishes,
// not a loss). That no one else had it meanwhile is judged by the overlap.
func judgeKept(rr *RestartResult, r *iterRecord, rs *restartRec) {
	released := (r.Released && !r.LostAtEnd) || r.ReleaseUnconfirmed
	rr.Kept = !r.LostBeforeRelease && (rs.HeldAfter || (released && r.Outcome == outcomeCompleted))
	if rr.Kept {
		return
	}
	switch {
	case r.LostBeforeRelease:
		rr.lostHow = "its holder was told during its hold: " + r.LostErr
	case !r.Released:
		rr.lostHow = "its release failed: " + r.ReleaseErr
	default:
		rr.lostHow = "iteration " + r.Outcome + " " + r.Err
	}
}

// excusePause excuses a paused holder's overlap from its SIGSTOP until its
// hold ended, and that of a holder the machine did not run for longer than
// its lease can bridge: it was paused as surely, by the scheduler, so its
// overlap from then on is the one the scenario shows, not a failure.
func (a *analysis) excusePause() {
	for _, p := range a.in.pauses {
		if r := a.byFence[p.Fence]; r != nil && r.Worker == p.Worker && r.Acquired > 0 {
			a.excusedFrom[r] = max(p.Start, r.Acquired)
		}
	}
	if a.sc.Renew <= 0 {
		return
	}
	bridge := a.sc.Lease - a.sc.Renew
	for _, r := range a.recs {
		if _, paused := a.excusedFrom[r]; paused || r.Acquired == 0 || r.StallFor <= int64(bridge) {
			continue
		}
		a.excusedFrom[r] = max(r.StallFrom, r.Acquired)
		a.note(fmt.Sprintf("pause: worker %d (fence %d), not one the demo paused, went %v without being run, %v into its hold: longer than its lease can bridge (%v, the lease less the renewal interval), so a pause like a SIGSTOP (a busy machine); told of the loss %s",
			r.Worker, r.Fence, nanos(r.StallFor), nanos(r.StallFrom-r.Acquired), bridge, yesNo(r.ToldAt > 0)))
	}
}

// excuseRestart excuses, when the backend does not keep locks across a
// restart, a hold's overlap from the kill -9 of the server on, and that of
// a hold whose Acquire waited through the outage and was then told of the
// loss: its lease counted from an attempt sent before the server was back,
// and the holder only finishes its hold.
func (a *analysis) excuseRestart() {
	rs := a.in.restart
	if rs == nil || a.sc.RestartSafe {
		return
	}
	for _, r := range a.recs {
		switch {
		case r.Acquired > 0 && r.Acquired < rs.Up && r.Exited > rs.Killed:
			a.excusedFrom[r] = max(rs.Killed, r.Acquired)
		case r.AcquireStart < rs.Up && r.Acquired > rs.Up && r.ToldAt > r.Acquired:
			a.excusedFrom[r] = r.ToldAt
			a.note(fmt.Sprintf("restart: worker %d's Acquire, waiting since before the restart, returned %v after it and the lock was lost %v later (%s): its lease counted from an attempt sent while the server was down",
				r.Worker, nanos(r.Acquired-rs.Up), nanos(r.ToldAt-r.Acquired), lossKind(r.LostErr)))
		}
	}
}

// checkEveryScenario checks what every scenario must show: no failed
// iteration or write, no stale write accepted, no stuck lock, every
// surviving worker finished.
func (a *analysis) checkEveryScenario() {
	res, in := a.res, a.in
	if res.Failed > 0 {
		a.reason(fmt.Sprintf("%d iterations failed; the first: %s", res.Failed, a.firstErr))
	}
	if res.WriteErrors > 0 {
		a.reason(fmt.Sprintf("%d writes to the store failed", res.WriteErrors))
	}
	if res.StaleAccepted > 0 {
		a.reason(fmt.Sprintf("the store ACCEPTED %d stale writes", res.StaleAccepted))
	}
	if in.lockLeft {
		a.reason("the lock was still held after every worker had ended (stuck lock)")
	}
	for w := 0; w < in.workers; w++ {
		if _, killed := in.killedAt[w]; !killed && !in.doneWorkers[w] && len(res.Reasons) == 0 {
			a.reason(fmt.Sprintf("worker %d did not finish its iterations", w))
		}
	}
}

// expectExclusive fails the run for any overlap of holders.
func (a *analysis) expectExclusive() {
	if a.res.Violations > 0 {
		a.reason(fmt.Sprintf("%d violations of mutual exclusion (the inside counter)", a.res.Violations))
	}
	if a.res.MaxConcurrent > 1 {
		a.reason(fmt.Sprintf("%d holders overlapped in time (CLOCK_MONOTONIC intervals)", a.res.MaxConcurrent))
	}
}

// expectNone fails the run for any overlap or stale write.
func (a *analysis) expectNone() {
	a.expectExclusive()
	if a.res.StaleAttempted > 0 {
		a.reason(fmt.Sprintf("%d stale writes were attempted", a.res.StaleAttempted))
	}
}

// expectAllCompleted fails the run unless every iteration completed.
func (a *analysis) expectAllCompleted() {
	if a.res.Completed != a.total {
		a.reason(fmt.Sprintf("%d of %d iterations completed", a.res.Completed, a.total))
	}
}

// judgeMutex: exclusive, every iteration completed.
func (a *analysis) judgeMutex() {
	a.expectNone()
	a.expectAllCompleted()
	if a.res.LossSignals > 0 {
		a.note(fmt.Sprintf("%d holders were told they lost the lock", a.res.LossSignals))
	}
}

// judgeExpiry: holders outliving their lease overlapped, were told, and
// their late writes were refused.
func (a *analysis) judgeExpiry() {
	res := a.res
	a.expectAllCompleted()
	if res.Violations == 0 {
		a.reason("no violation: holders outliving their lease should have overlapped")
	}
	if res.StaleAttempted == 0 {
		a.reason("no stale write: late writes of holders that outlived their lease should have been refused")
	}
	if res.LossSignals != res.Completed {
		a.reason(fmt.Sprintf("only %d of %d holders that outlived their lease were told (Done/Err) before they released", res.LossSignals, res.Completed))
	}
	a.note(fmt.Sprintf("expiry: workers ignored %d loss signals on purpose; up to %d held at once; %d late writes, all refused by the fence",
		res.LossSignals, res.MaxConcurrent, res.StaleAttempted-res.StaleAccepted))
}

// judgePause: each paused holder was told, its lock taken over within the
// bound, its late writes refused; no overlap apart from the paused ones.
func (a *analysis) judgePause() {
	res := a.res
	a.expectAllCompleted()
	switch {
	case len(res.Pauses) == 0:
		a.reason("no holder was paused")
	case len(res.Pauses) < a.in.pausesPlanned:
		a.note(fmt.Sprintf("pause: %d of %d planned pauses: no other worker was left to take over", len(res.Pauses), a.in.pausesPlanned))
	}
	late, refused := 0, 0
	for _, p := range res.Pauses {
		late += p.LateWrites
		refused += p.LateRejected
		a.judgeOnePause(p)
	}
	if len(res.Pauses) > 0 && late == 0 {
		a.reason("no paused holder wrote after it was resumed")
	}
	if refused < late {
		a.reason(fmt.Sprintf("%d of %d late writes of paused holders were not refused", late-refused, late))
	}
	a.ex.judge(res, "a paused holder after its SIGSTOP (or a stall its lease could not bridge)")
	if n := res.Violations - a.ex.violations; n > 0 {
		a.note(fmt.Sprintf("pause: %d violations involving a paused holder are expected: a stopped holder still counts itself inside while the next one enters; the fence kept its late writes out", n))
	}
}

// judgeOnePause checks and describes one pause.
func (a *analysis) judgeOnePause(p PauseResult) {
	bound := millis(a.sc.TakeoverBound())
	if !p.LossSignal {
		a.reason(fmt.Sprintf("paused worker %d (fence %d) was not told it lost the lock", p.Worker, p.Fence))
	}
	if p.Takeover < 0 || p.Takeover > bound {
		a.reason(fmt.Sprintf("lock of paused worker %d taken over after %v, not within lease + 100ms (%v)", p.Worker, showTakeover(p.Takeover), bound))
	}
	a.note(fmt.Sprintf("pause: worker %d (fence %d) stopped %v at %v: told of the loss %v; lease out on the server %v later, another worker had the lock %v later; late writes %d, refused %d",
		p.Worker, p.Fence, p.Stopped, p.At, yesNo(p.LossSignal), showTakeover(p.Free), showTakeover(p.Takeover), p.LateWrites, p.LateRejected))
	if p.Free >= 0 && p.Takeover > p.Free+100 {
		a.note(lateWaiterNote(p.Takeover - p.Free))
	}
}

// judgeCrash: exclusive; each holder killed -9 had its lock free within
// the lease and taken over; every surviving worker completed.
func (a *analysis) judgeCrash() {
	a.expectExclusive()
	held := 0
	for _, k := range a.res.Kills {
		if !k.Held {
			a.note(fmt.Sprintf("crash: worker %d was killed just after it released the lock (not counted)", k.Worker))
			continue
		}
		held++
		a.judgeOneKill(k)
	}
	switch {
	case held == 0:
		a.reason("no holder was killed while holding the lock")
	case held < a.in.killsPlanned:
		a.note(fmt.Sprintf("crash: %d of %d planned kills: no other worker was left to take over", held, a.in.killsPlanned))
	}
	for w := 0; w < a.in.workers; w++ {
		if _, killed := a.in.killedAt[w]; !killed && a.completedBy[w] != a.in.iterations {
			a.reason(fmt.Sprintf("surviving worker %d completed %d of %d iterations", w, a.completedBy[w], a.in.iterations))
		}
	}
}

// judgeOneKill checks and describes the kill of a holder. The lease was
// renewed before the kill, so it runs out on the server within the lease
// (plus the 1ms poll).
func (a *analysis) judgeOneKill(k KillResult) {
	res := a.res
	if k.Free < 0 || k.Free > res.Lease+millis(a.sc.ExpirySlack)+freeSlack {
		a.reason(fmt.Sprintf("lock of killed worker %d free again after %v, not within the lease (%v)", k.Worker, showTakeover(k.Free), dur(res.Lease)))
	}
	if k.Takeover < 0 {
		a.reason(fmt.Sprintf("no worker took the lock over after worker %d was killed", k.Worker))
	}
	a.note(fmt.Sprintf("crash: worker %d (fence %d) kill -9ed at %v while holding: the lock was free again %v later (lease %v), another worker had it %v later",
		k.Worker, k.Fence, k.At, showTakeover(k.Free), dur(res.Lease), showTakeover(k.Takeover)))
	if k.Free >= 0 && k.Takeover > k.Free+100 {
		a.note(lateWaiterNote(k.Takeover - k.Free))
	}
}

// judgeFair: exclusive, and the fair scenario's own checks.
func (a *analysis) judgeFair() {
	a.expectNone()
	analyzeFair(a.res, a.in, a.recs)
}

// judgeFailover: the failover scenarios' own checks.
func (a *analysis) judgeFailover() {
	analyzeFailovers(a.res, a.in, a.recs)
}

// judgeRestart: the servers were restarted, fences went up across it, and
// every iteration completed or was interrupted; then what the backend
// promises across a restart.
func (a *analysis) judgeRestart() {
	res := a.res
	rs := res.Restart
	if rs == nil {
		a.reason("redis-server was not restarted")
		return
	}
	if rs.FenceBefore == 0 || rs.FenceAfter == 0 {
		a.reason("no acquisitions on both sides of the restart")
	} else if rs.FenceAfter <= rs.FenceBefore {
		a.reason(fmt.Sprintf("fences went backwards across the restart: %d before, %d after", rs.FenceBefore, rs.FenceAfter))
	}
	if res.Completed+res.Interrupted != a.total {
		a.reason(fmt.Sprintf("%d completed + %d interrupted of %d iterations", res.Completed, res.Interrupted, a.total))
	}
	if a.sc.RestartSafe {
		a.judgeSafeRestart(rs)
		return
	}
	a.judgeLossyRestart(rs)
}

// judgeSafeRestart: nothing is excused, no two holders across the restart;
// with KeepsLocks, the holder at the kill must keep its lock too.
func (a *analysis) judgeSafeRestart(rs *RestartResult) {
	a.note(fmt.Sprintf("restart: %s kill -9ed at %v, answering again %v later; fence %d before -> %d after",
		rs.What, rs.At, rs.Down, rs.FenceBefore, rs.FenceAfter))
	a.expectNone()
	if a.res.MaxConcurrent > 1 {
		a.noteRestartOverlaps()
	}
	switch {
	case rs.HolderFence == 0:
		a.note("restart: the holder left before the kill; no lock was held across it")
	case !rs.Kept && a.sc.KeepsLocks:
		a.reason(fmt.Sprintf("the lock held across the restart (fence %d) was lost: %s", rs.HolderFence, rs.lostHow))
	case !rs.Kept:
		a.note(fmt.Sprintf("restart: the lock held across it (fence %d) was lost (%s), and no one else had it meanwhile: the killed servers were among the few that held it, so no majority could confirm it any more", rs.HolderFence, rs.lostHow))
	default:
		how := "its holder released it normally"
		if rs.HeldAfter {
			how = "the lock still carried its fence when the servers answered again"
		}
		a.note(fmt.Sprintf("restart: the lock held across it (fence %d) was kept: its holder was told of no loss, %s, and no one else had it meanwhile", rs.HolderFence, how))
	}
}

// noteRestartOverlaps says who overlapped whom, on the restart's clock.
func (a *analysis) noteRestartOverlaps() {
	restart := a.in.restart
	rel := func(t int64) string {
		if t == 0 {
			return "-"
		}
		return nanos(t - restart.Killed).String()
	}
	for i, x := range a.acq {
		for _, y := range a.acq[i+1:] {
			if x.Acquired > 0 && y.Acquired > 0 && x.Exited > y.Acquired && y.Acquired >= x.Acquired {
				a.note(fmt.Sprintf("restart: worker %d (fence %d; acquire sent %s, returned %s, told %s %s, hold ended %s) overlapped worker %d (fence %d; acquire sent %s, returned %s); times since the kill, servers up at %s",
					x.Worker, x.Fence, rel(x.AcquireStart), rel(x.Acquired), rel(x.ToldAt), x.LostErr, rel(x.Exited),
					y.Worker, y.Fence, rel(y.AcquireStart), rel(y.Acquired), rel(restart.Up)))
			}
		}
	}
}

// judgeLossyRestart: the restart may lose the lock (a lease on one Redis);
// no overlap apart from the holds that spanned it.
func (a *analysis) judgeLossyRestart(rs *RestartResult) {
	res := a.res
	a.note(fmt.Sprintf("restart: redis-server kill -9ed at %v, answering again %v later (empty); fence %d before -> %d after; %d iterations interrupted",
		rs.At, rs.Down, rs.FenceBefore, rs.FenceAfter, res.Interrupted))
	a.ex.judge(res, "a hold that spanned the restart")
	if n := res.Violations - a.ex.violations; n > 0 || res.MaxConcurrent > a.ex.maxConcurrent {
		with := ""
		if n > 0 {
			with = fmt.Sprintf(" (%d violations of the counter with it)", n)
		}
		a.note("restart: the restart lost the lock, so a hold that spanned it overlapped later ones" + with + ": the documented limit of a lease on one Redis; the fence kept the data safe")
	}
}

// cutShort: a run stopped early (Ctrl-C, timeout) fails for that reason
// alone, whatever else looks wrong follows from it; any other reason fails
// the run.
func (a *analysis) cutShort() {
	res := a.res
	if a.in.stopped != "" {
		res.Reasons = []string{a.in.stopped}
		res.Notes = slices.DeleteFunc(res.Notes, func(n string) bool { return strings.Contains(n, "planned") })
	}
	if len(res.Reasons) > 0 && res.Status != StatusSkip {
		res.Status = StatusFail
	}
}

// freeSlack covers the master's polling when it measures when a lock
// became free.
const freeSlack = 10

// lateWaiterNote explains a takeover that came well after the lock was free.
func lateWaiterNote(late Millis) string {
	return fmt.Sprintf("  the waiters took the lock only %v after it was free on the server (likely cause: a waiter that asks in the lease's last millisecond is told PTTL 0, takes that as \"unknown\" and sleeps a full backoff)", late)
}

// sinceOrNever returns t - from, or -1 when t is 0 (not seen).
func sinceOrNever(t, from int64) Millis {
	if t == 0 {
		return -1
	}
	return nanos(t - from)
}

func showTakeover(m Millis) string {
	if m < 0 {
		return "never"
	}
	return m.String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

// interval is a hold, on the mono clock.
type interval struct{ start, end int64 }

// meets reports whether a and b share an instant (ends included).
func (a interval) meets(b interval) bool { return a.start <= b.end && b.start <= a.end }

// counterViolations returns, for each violation of the "inside" counter in
// r (an INCR on entry that did not return 1, a DECR on exit that did not
// return 0), when its script ran, as closely as r tells: the entry between
// Acquire returning and the first write, the exit between the last write
// and the end of the hold.
func counterViolations(r *iterRecord) []interval {
	var out []interval
	if r.EnterRan && r.EnterN != 1 {
		end := r.Exited
		if len(r.Writes) > 0 {
			end = r.Writes[0].Start
		}
		out = append(out, interval{r.Acquired, max(end, r.Acquired)})
	}
	if r.ExitRan && r.ExitN != 0 {
		start := r.Acquired
		if n := len(r.Writes); n > 0 {
			start = r.Writes[n-1].End
		}
		out = append(out, interval{min(start, r.Exited), r.Exited})
	}
	return out
}

// overlapLeft is what remains of the overlap of a run once the scenario's
// disruption has excused its part.
type overlapLeft struct {
	maxConcurrent int // most holds that overlapped, excused parts left out
	violations    int // counter violations that ran outside every excused part
}

// excuseOverlap measures overlap with the holds in excusedFrom excused from
// the given time until they ended: an overlap counts only between the parts
// of holds that are not excused, and a counter violation only when its
// script ran outside every excused part (of any hold: a holder's own exit
// too, when the next one was inside).
func excuseOverlap(recs []*iterRecord, excusedFrom map[*iterRecord]int64) overlapLeft {
	var judged, excused []interval
	for _, r := range recs {
		if r.Acquired == 0 {
			continue
		}
		end := r.Exited
		if from, ok := excusedFrom[r]; ok {
			excused = append(excused, interval{from, r.Exited})
			end = min(end, from)
		}
		if end > r.Acquired {
			judged = append(judged, interval{r.Acquired, end})
		}
	}
	left := overlapLeft{maxConcurrent: maxOverlap(judged)}
	for _, r := range recs {
		for _, v := range counterViolations(r) {
			if !slices.ContainsFunc(excused, v.meets) {
				left.violations++
			}
		}
	}
	return left
}

// judge fails res for the overlap left once what involves the excused
// holds (described by what) is set aside.
func (l overlapLeft) judge(res *Result, what string) {
	if l.violations > 0 {
		res.Reasons = append(res.Reasons, fmt.Sprintf("%d violations of mutual exclusion (the inside counter) not involving %s", l.violations, what))
	}
	if l.maxConcurrent > 1 {
		res.Reasons = append(res.Reasons, fmt.Sprintf("%d holders overlapped in time (CLOCK_MONOTONIC intervals) apart from %s", l.maxConcurrent, what))
	}
}

// maxOverlap returns the largest number of intervals that contain one
// instant. An interval ending when another starts does not overlap it.
func maxOverlap(ivs []interval) int {
	type point struct {
		t     int64
		delta int
	}
	pts := make([]point, 0, 2*len(ivs))
	for _, iv := range ivs {
		end := max(iv.end, iv.start)
		pts = append(pts, point{iv.start, +1}, point{end, -1})
	}
	slices.SortFunc(pts, func(a, b point) int {
		return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.delta, b.delta)) // ends first
	})
	n, most := 0, 0
	for _, p := range pts {
		n += p.delta
		most = max(most, n)
	}
	return most
}

// writeStats summarizes the writes of a run.
type writeStats struct {
	attempted   int   // refused as stale, plus accepted ones that were provably stale
	accepted    int   // accepted though provably stale
	errors      int   // neither accepted nor refused
	unexplained int   // refused with no newer accepted write seen starting before it ended
	maxAccepted int64 // the largest fence of an accepted write
}

// staleWrites decides which writes were stale. The store's word is taken
// for refusals; acceptances are checked against the clock: a write is
// provably stale if a write with a larger fence was accepted and had
// *returned* before this one *started* (the store then saw them in that
// order, so it had to refuse this one). That cannot blame the store for
// writes that merely overlapped in time.
func staleWrites(writes []writeRecord) writeStats {
	var st writeStats
	var accepted []writeRecord
	for _, w := range writes {
		switch w.Result {
		case writeOK:
			accepted = append(accepted, w)
			st.maxAccepted = max(st.maxAccepted, w.Fence)
		case writeStale:
			st.attempted++
		default:
			st.errors++
		}
	}
	byEnd := slices.Clone(accepted)
	slices.SortFunc(byEnd, func(a, b writeRecord) int { return cmp.Compare(a.End, b.End) })
	byStart := slices.Clone(accepted)
	slices.SortFunc(byStart, func(a, b writeRecord) int { return cmp.Compare(a.Start, b.Start) })
	var newest int64 // the largest fence accepted and returned before the current start
	j := 0
	for _, w := range byStart {
		for j < len(byEnd) && byEnd[j].End < w.Start {
			newest = max(newest, byEnd[j].Fence)
			j++
		}
		if w.Fence < newest {
			st.attempted++
			st.accepted++
		}
	}
	for _, w := range writes {
		if w.Result != writeStale {
			continue
		}
		explained := false
		for _, a := range accepted {
			if a.Fence > w.Fence && a.Start < w.End {
				explained = true
				break
			}
		}
		if !explained {
			st.unexplained++
		}
	}
	return st
}

// percentile returns the p-th percentile (nearest rank) of xs, or 0.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}
