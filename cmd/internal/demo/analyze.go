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
// scenario's expectation.
func analyze(res *Result, in analysisInput) {
	sc := in.sc
	res.Reasons = append(res.Reasons, in.ctlErrs...)

	// The iterations, in order; finish those a kill (or a failure) cut short.
	recs := make([]*iterRecord, 0, len(in.recs))
	for _, r := range in.recs {
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b *iterRecord) int {
		return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Iter, b.Iter))
	})
	var firstErr string
	completedBy := map[int]int{}
	for _, r := range recs {
		if r.Outcome == "" {
			if at, ok := in.killedAt[r.Worker]; ok {
				r.Outcome = outcomeKilled
				if r.Exited == 0 {
					r.Exited = at
				}
			} else {
				r.Outcome, r.Err = outcomeFailed, "the worker never finished the iteration"
			}
		}
		if r.Acquired > 0 && r.Exited == 0 {
			r.Exited = in.end
		}
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
			completedBy[r.Worker]++
		case outcomeInterrupted:
			res.Interrupted++
		case outcomeKilled:
			res.Killed++
		default:
			res.Failed++
			if firstErr == "" {
				firstErr = fmt.Sprintf("worker %d iteration %d: %s", r.Worker, r.Iter, r.Err)
			}
		}
	}

	// Hold intervals [Acquire returned, Release called], on the system-wide
	// monotonic clock: how many overlapped at most.
	var ivs []interval
	for _, r := range recs {
		if r.Acquired > 0 {
			ivs = append(ivs, interval{r.Acquired, r.Exited})
		}
	}
	res.MaxConcurrent = maxOverlap(ivs)

	// Fences.
	var acq []*iterRecord // acquisitions, by fence
	for _, r := range recs {
		if r.Fence > 0 {
			acq = append(acq, r)
		}
	}
	slices.SortFunc(acq, func(a, b *iterRecord) int { return cmp.Compare(a.Fence, b.Fence) })
	res.Acquisitions = len(acq)
	if len(acq) > 0 {
		res.FenceMin, res.FenceMax = acq[0].Fence, acq[len(acq)-1].Fence
	}
	for i := 1; i < len(acq); i++ {
		if acq[i].Fence == acq[i-1].Fence {
			res.Reasons = append(res.Reasons, fmt.Sprintf("fence %d was given to two acquisitions (workers %d and %d)",
				acq[i].Fence, acq[i-1].Worker, acq[i].Worker))
		}
	}

	// Writes: which were stale, and did the store accept any of them?
	var writes []writeRecord
	for _, r := range recs {
		writes = append(writes, r.Writes...)
	}
	ws := staleWrites(writes)
	res.Writes, res.StaleAttempted, res.StaleAccepted, res.WriteErrors = len(writes), ws.attempted, ws.accepted, ws.errors
	if ws.unexplained > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d writes were refused though no newer accepted write was seen before they ended (a write the master did not hear of?)", ws.unexplained))
	}
	if ws.maxAccepted > 0 && in.storeToken > 0 {
		switch {
		case in.storeToken < ws.maxAccepted:
			res.Reasons = append(res.Reasons, fmt.Sprintf("the store ended with fence %d though it accepted fence %d", in.storeToken, ws.maxAccepted))
		case in.storeToken > ws.maxAccepted:
			res.Notes = append(res.Notes, fmt.Sprintf("the store ended with fence %d, newer than any accepted write reported (%d)", in.storeToken, ws.maxAccepted))
		}
	}

	// Hand-offs: a release, then the next fence's acquisition.
	var handoffs []float64
	for i := 1; i < len(acq); i++ {
		prev, next := acq[i-1], acq[i]
		if prev.Released && prev.ReleaseStart > 0 && next.Acquired > prev.ReleaseStart {
			handoffs = append(handoffs, float64(nanos(next.Acquired-prev.ReleaseStart)))
		}
	}
	res.Handoffs = len(handoffs)
	res.HandoffP50, res.HandoffP99 = Millis(percentile(handoffs, 50)), Millis(percentile(handoffs, 99))

	// takeover returns how long after at the first acquisition with a fence
	// above f returned, or -1.
	takeover := func(f int64, at int64) (Millis, *iterRecord) {
		i, _ := slices.BinarySearchFunc(acq, f+1, func(r *iterRecord, f int64) int { return cmp.Compare(r.Fence, f) })
		if i < len(acq) && acq[i].Acquired > 0 {
			return nanos(acq[i].Acquired - at), acq[i]
		}
		return -1, nil
	}
	byFence := map[int64]*iterRecord{}
	for _, r := range acq {
		byFence[r.Fence] = r
	}

	for _, p := range in.pauses {
		pr := PauseResult{Worker: p.Worker, Fence: p.Fence, At: nanos(p.Start - in.t0), Stopped: nanos(p.End - p.Start), Free: sinceOrNever(p.Free, p.Start)}
		var next *iterRecord
		pr.Takeover, next = takeover(p.Fence, p.Start)
		if next != nil && next.Worker == p.Worker {
			pr.Takeover = -1 // not another worker
		}
		if r := byFence[p.Fence]; r != nil {
			pr.LossSignal = r.LostBeforeRelease || r.LostAtEnd
			for _, w := range r.Writes {
				if w.Start > p.End {
					pr.LateWrites++
					if w.Result == writeStale {
						pr.LateRejected++
					}
				}
			}
		}
		res.Pauses = append(res.Pauses, pr)
	}
	for _, k := range in.kills {
		kr := KillResult{Worker: k.Worker, Fence: k.Fence, At: nanos(k.At - in.t0), Held: k.HeldAtKill, Free: sinceOrNever(k.Free, k.At), Takeover: -1}
		if k.HeldAtKill {
			kr.Takeover, _ = takeover(k.Fence, k.At)
		}
		res.Kills = append(res.Kills, kr)
	}
	if rs := in.restart; rs != nil {
		rr := &RestartResult{At: nanos(rs.Killed - in.t0), Down: nanos(rs.Up - rs.Killed), What: rs.What, HolderFence: rs.HolderFence, HeldAfter: rs.HeldAfter}
		if r := byFence[rs.HolderFence]; r != nil && rs.HolderFence != 0 {
			// Kept: told of no loss, released normally, no other holder
			// meanwhile (the sweep below judges that part).
			// Kept: never told of a loss, and the lock still had it when
			// the servers answered again, or its holder released it
			// normally (or could not reach the servers to release it: an
			// outage, which the background release finishes, not a loss);
			// the sweep below checks that no one else had it.
			released := (r.Released && !r.LostAtEnd) || r.ReleaseUnconfirmed
			rr.Kept = !r.LostBeforeRelease && (rs.HeldAfter || (released && r.Outcome == outcomeCompleted))
			if !rr.Kept {
				switch {
				case r.LostBeforeRelease:
					rr.lostHow = "its holder was told during its hold: " + r.LostErr
				case !r.Released:
					rr.lostHow = "its release failed: " + r.ReleaseErr
				default:
					rr.lostHow = "iteration " + r.Outcome + " " + r.Err
				}
			}
		}
		for _, r := range acq {
			if r.Acquired > 0 && r.Acquired < rs.Killed {
				rr.FenceBefore = max(rr.FenceBefore, r.Fence)
			}
			if r.Acquired > rs.Up && (rr.FenceAfter == 0 || r.Fence < rr.FenceAfter) {
				rr.FenceAfter = r.Fence
			}
		}
		res.Restart = rr
	}

	// Overlap the scenario's disruption explains: a paused holder's, from
	// its SIGSTOP until its hold ended; a hold's that spanned the restart of
	// redis-server, from the kill -9 on. Everything else must be exclusive.
	excusedFrom := map[*iterRecord]int64{}
	switch sc.Name {
	case "pause":
		for _, p := range in.pauses {
			if r := byFence[p.Fence]; r != nil && r.Worker == p.Worker && r.Acquired > 0 {
				excusedFrom[r] = max(p.Start, r.Acquired)
			}
		}
		// A holder the machine did not run for longer than its lease can
		// bridge was paused as surely, by the scheduler: its overlap from
		// then on is the one the scenario shows, not a failure.
		if bridge := sc.Lease - sc.Renew; sc.Renew > 0 {
			for _, r := range recs {
				if _, paused := excusedFrom[r]; paused || r.Acquired == 0 || r.StallFor <= int64(bridge) {
					continue
				}
				excusedFrom[r] = max(r.StallFrom, r.Acquired)
				res.Notes = append(res.Notes, fmt.Sprintf("pause: worker %d (fence %d), not one the demo paused, went %v without being run, %v into its hold: longer than its lease can bridge (%v, the lease less the renewal interval), so a pause like a SIGSTOP (a busy machine); told of the loss %s",
					r.Worker, r.Fence, nanos(r.StallFor), nanos(r.StallFrom-r.Acquired), bridge, yesNo(r.ToldAt > 0)))
			}
		}
	case "restart":
		if rs := in.restart; rs != nil && !sc.RestartSafe {
			for _, r := range recs {
				switch {
				case r.Acquired > 0 && r.Acquired < rs.Up && r.Exited > rs.Killed:
					excusedFrom[r] = max(rs.Killed, r.Acquired)
				case r.AcquireStart < rs.Up && r.Acquired > rs.Up && r.ToldAt > r.Acquired:
					// An acquire that waited through the outage can return
					// with little of its lease left (it counts from when
					// the attempt was sent, before the server was back);
					// told of the loss, the holder only finishes its hold.
					excusedFrom[r] = r.ToldAt
					res.Notes = append(res.Notes, fmt.Sprintf("restart: worker %d's Acquire, waiting since before the restart, returned %v after it and the lock was lost %v later (%s): its lease counted from an attempt sent while the server was down",
						r.Worker, nanos(r.Acquired-rs.Up), nanos(r.ToldAt-r.Acquired), lossKind(r.LostErr)))
				}
			}
		}
	}
	ex := excuseOverlap(recs, excusedFrom)

	// Verdict: what every scenario must show...
	if res.Failed > 0 {
		res.Reasons = append(res.Reasons, fmt.Sprintf("%d iterations failed; the first: %s", res.Failed, firstErr))
	}
	if res.WriteErrors > 0 {
		res.Reasons = append(res.Reasons, fmt.Sprintf("%d writes to the store failed", res.WriteErrors))
	}
	if res.StaleAccepted > 0 {
		res.Reasons = append(res.Reasons, fmt.Sprintf("the store ACCEPTED %d stale writes", res.StaleAccepted))
	}
	if in.lockLeft {
		res.Reasons = append(res.Reasons, "the lock was still held after every worker had ended (stuck lock)")
	}
	total := in.workers * in.iterations
	for w := 0; w < in.workers; w++ {
		if _, killed := in.killedAt[w]; !killed && !in.doneWorkers[w] && len(res.Reasons) == 0 {
			res.Reasons = append(res.Reasons, fmt.Sprintf("worker %d did not finish its iterations", w))
		}
	}

	// ... and what this one must show.
	expectNone := func() {
		if res.Violations > 0 {
			res.Reasons = append(res.Reasons, fmt.Sprintf("%d violations of mutual exclusion (the inside counter)", res.Violations))
		}
		if res.MaxConcurrent > 1 {
			res.Reasons = append(res.Reasons, fmt.Sprintf("%d holders overlapped in time (CLOCK_MONOTONIC intervals)", res.MaxConcurrent))
		}
		if res.StaleAttempted > 0 {
			res.Reasons = append(res.Reasons, fmt.Sprintf("%d stale writes were attempted", res.StaleAttempted))
		}
	}
	expectAllCompleted := func() {
		if res.Completed != total {
			res.Reasons = append(res.Reasons, fmt.Sprintf("%d of %d iterations completed", res.Completed, total))
		}
	}
	bound := millis(sc.TakeoverBound())
	switch sc.Name {
	case "mutex", "renew":
		expectNone()
		expectAllCompleted()
		if res.LossSignals > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%d holders were told they lost the lock", res.LossSignals))
		}
	case "expiry":
		expectAllCompleted()
		if res.Violations == 0 {
			res.Reasons = append(res.Reasons, "no violation: holders outliving their lease should have overlapped")
		}
		if res.StaleAttempted == 0 {
			res.Reasons = append(res.Reasons, "no stale write: late writes of holders that outlived their lease should have been refused")
		}
		if res.LossSignals != res.Completed {
			res.Reasons = append(res.Reasons, fmt.Sprintf("only %d of %d holders that outlived their lease were told (Done/Err) before they released", res.LossSignals, res.Completed))
		}
		res.Notes = append(res.Notes, fmt.Sprintf("expiry: workers ignored %d loss signals on purpose; up to %d held at once; %d late writes, all refused by the fence",
			res.LossSignals, res.MaxConcurrent, res.StaleAttempted-res.StaleAccepted))
	case "pause":
		expectAllCompleted()
		switch {
		case len(res.Pauses) == 0:
			res.Reasons = append(res.Reasons, "no holder was paused")
		case len(res.Pauses) < in.pausesPlanned:
			res.Notes = append(res.Notes, fmt.Sprintf("pause: %d of %d planned pauses: no other worker was left to take over", len(res.Pauses), in.pausesPlanned))
		}
		late, refused := 0, 0
		for _, p := range res.Pauses {
			late += p.LateWrites
			refused += p.LateRejected
			if !p.LossSignal {
				res.Reasons = append(res.Reasons, fmt.Sprintf("paused worker %d (fence %d) was not told it lost the lock", p.Worker, p.Fence))
			}
			if p.Takeover < 0 || p.Takeover > bound {
				res.Reasons = append(res.Reasons, fmt.Sprintf("lock of paused worker %d taken over after %v, not within lease + 100ms (%v)", p.Worker, showTakeover(p.Takeover), bound))
			}
			res.Notes = append(res.Notes, fmt.Sprintf("pause: worker %d (fence %d) stopped %v at %v: told of the loss %v; lease out on the server %v later, another worker had the lock %v later; late writes %d, refused %d",
				p.Worker, p.Fence, p.Stopped, p.At, yesNo(p.LossSignal), showTakeover(p.Free), showTakeover(p.Takeover), p.LateWrites, p.LateRejected))
			if p.Free >= 0 && p.Takeover > p.Free+100 {
				res.Notes = append(res.Notes, lateWaiterNote(p.Takeover-p.Free))
			}
		}
		if len(res.Pauses) > 0 && late == 0 {
			res.Reasons = append(res.Reasons, "no paused holder wrote after it was resumed")
		}
		if refused < late {
			res.Reasons = append(res.Reasons, fmt.Sprintf("%d of %d late writes of paused holders were not refused", late-refused, late))
		}
		ex.judge(res, "a paused holder after its SIGSTOP (or a stall its lease could not bridge)")
		if n := res.Violations - ex.violations; n > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("pause: %d violations involving a paused holder are expected: a stopped holder still counts itself inside while the next one enters; the fence kept its late writes out", n))
		}
	case "crash":
		if res.Violations > 0 {
			res.Reasons = append(res.Reasons, fmt.Sprintf("%d violations of mutual exclusion (the inside counter)", res.Violations))
		}
		if res.MaxConcurrent > 1 {
			res.Reasons = append(res.Reasons, fmt.Sprintf("%d holders overlapped in time (CLOCK_MONOTONIC intervals)", res.MaxConcurrent))
		}
		held := 0
		for _, k := range res.Kills {
			if !k.Held {
				res.Notes = append(res.Notes, fmt.Sprintf("crash: worker %d was killed just after it released the lock (not counted)", k.Worker))
				continue
			}
			held++
			// The lease was renewed before the kill, so it runs out on the
			// server within the lease (plus the 1ms poll).
			if k.Free < 0 || k.Free > res.Lease+millis(sc.ExpirySlack)+freeSlack {
				res.Reasons = append(res.Reasons, fmt.Sprintf("lock of killed worker %d free again after %v, not within the lease (%v)", k.Worker, showTakeover(k.Free), dur(res.Lease)))
			}
			if k.Takeover < 0 {
				res.Reasons = append(res.Reasons, fmt.Sprintf("no worker took the lock over after worker %d was killed", k.Worker))
			}
			res.Notes = append(res.Notes, fmt.Sprintf("crash: worker %d (fence %d) kill -9ed at %v while holding: the lock was free again %v later (lease %v), another worker had it %v later",
				k.Worker, k.Fence, k.At, showTakeover(k.Free), dur(res.Lease), showTakeover(k.Takeover)))
			if k.Free >= 0 && k.Takeover > k.Free+100 {
				res.Notes = append(res.Notes, lateWaiterNote(k.Takeover-k.Free))
			}
		}
		switch {
		case held == 0:
			res.Reasons = append(res.Reasons, "no holder was killed while holding the lock")
		case held < in.killsPlanned:
			res.Notes = append(res.Notes, fmt.Sprintf("crash: %d of %d planned kills: no other worker was left to take over", held, in.killsPlanned))
		}
		for w := 0; w < in.workers; w++ {
			if _, killed := in.killedAt[w]; !killed && completedBy[w] != in.iterations {
				res.Reasons = append(res.Reasons, fmt.Sprintf("surviving worker %d completed %d of %d iterations", w, completedBy[w], in.iterations))
			}
		}
	case "fair":
		expectNone()
		analyzeFair(res, in, recs)
	case "failover", "cluster-failover":
		analyzeFailovers(res, in, recs)
	case "restart":
		rs := res.Restart
		if rs == nil {
			res.Reasons = append(res.Reasons, "redis-server was not restarted")
			break
		}
		if rs.FenceBefore == 0 || rs.FenceAfter == 0 {
			res.Reasons = append(res.Reasons, "no acquisitions on both sides of the restart")
		} else if rs.FenceAfter <= rs.FenceBefore {
			res.Reasons = append(res.Reasons, fmt.Sprintf("fences went backwards across the restart: %d before, %d after", rs.FenceBefore, rs.FenceAfter))
		}
		if res.Completed+res.Interrupted != total {
			res.Reasons = append(res.Reasons, fmt.Sprintf("%d completed + %d interrupted of %d iterations", res.Completed, res.Interrupted, total))
		}
		if sc.RestartSafe {
			// Nothing is excused: no two holders across the restart. With
			// KeepsLocks, the holder at the kill must keep its lock too.
			res.Notes = append(res.Notes, fmt.Sprintf("restart: %s kill -9ed at %v, answering again %v later; fence %d before -> %d after",
				rs.What, rs.At, rs.Down, rs.FenceBefore, rs.FenceAfter))
			expectNone()
			if res.MaxConcurrent > 1 {
				// Say who overlapped whom, on the restart's clock.
				rel := func(t int64) string {
					if t == 0 {
						return "-"
					}
					return nanos(t - in.restart.Killed).String()
				}
				for i, a := range acq {
					for _, b := range acq[i+1:] {
						if a.Acquired > 0 && b.Acquired > 0 && a.Exited > b.Acquired && b.Acquired >= a.Acquired {
							res.Notes = append(res.Notes, fmt.Sprintf("restart: worker %d (fence %d; acquire sent %s, returned %s, told %s %s, hold ended %s) overlapped worker %d (fence %d; acquire sent %s, returned %s); times since the kill, servers up at %s",
								a.Worker, a.Fence, rel(a.AcquireStart), rel(a.Acquired), rel(a.ToldAt), a.LostErr, rel(a.Exited),
								b.Worker, b.Fence, rel(b.AcquireStart), rel(b.Acquired), rel(in.restart.Up)))
						}
					}
				}
			}
			switch {
			case rs.HolderFence == 0:
				res.Notes = append(res.Notes, "restart: the holder left before the kill; no lock was held across it")
			case !rs.Kept && sc.KeepsLocks:
				res.Reasons = append(res.Reasons, fmt.Sprintf("the lock held across the restart (fence %d) was lost: %s", rs.HolderFence, rs.lostHow))
			case !rs.Kept:
				res.Notes = append(res.Notes, fmt.Sprintf("restart: the lock held across it (fence %d) was lost (%s), and no one else had it meanwhile: the killed servers were among the few that held it, so no majority could confirm it any more", rs.HolderFence, rs.lostHow))
			default:
				how := "its holder released it normally"
				if rs.HeldAfter {
					how = "the lock still carried its fence when the servers answered again"
				}
				res.Notes = append(res.Notes, fmt.Sprintf("restart: the lock held across it (fence %d) was kept: its holder was told of no loss, %s, and no one else had it meanwhile", rs.HolderFence, how))
			}
			break
		}
		res.Notes = append(res.Notes, fmt.Sprintf("restart: redis-server kill -9ed at %v, answering again %v later (empty); fence %d before -> %d after; %d iterations interrupted",
			rs.At, rs.Down, rs.FenceBefore, rs.FenceAfter, res.Interrupted))
		ex.judge(res, "a hold that spanned the restart")
		if n := res.Violations - ex.violations; n > 0 || res.MaxConcurrent > ex.maxConcurrent {
			with := ""
			if n > 0 {
				with = fmt.Sprintf(" (%d violations of the counter with it)", n)
			}
			res.Notes = append(res.Notes, "restart: the restart lost the lock, so a hold that spanned it overlapped later ones"+with+": the documented limit of a lease on one Redis; the fence kept the data safe")
		}
	}

	if in.stopped != "" {
		// Whatever else looks wrong follows from that.
		res.Reasons = []string{in.stopped}
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
