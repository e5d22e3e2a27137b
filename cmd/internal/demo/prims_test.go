package demo

import (
	"strings"
	"testing"
	"time"
)

// The primitives scenarios with their real worker processes against an
// external redis-server. Rates and waits are logged, not asserted: a busy
// machine moves them; what is asserted is what the scenarios judge (no
// holder beyond the rule, fences rising, no stale write accepted, no
// double run) and that each showed what it is for.

func TestScenarioSemaphore(t *testing.T) {
	res := runDemo(t, primSemaphore, true, Config{})
	expectPass(t, res)
	ps := res.Prim
	if ps == nil {
		t.Fatal("no summary")
	}
	if ps.Violations != 0 || ps.Overlaps != 0 || ps.FenceRegressions != 0 || res.StaleAccepted != 0 || ps.Holds == 0 {
		t.Errorf("semaphore: %+v", ps)
	}
	// 12 goroutines on 3 permits: all 3 in use at times, never more.
	if ps.MaxCounted != 3 || ps.MaxSeen != 3 {
		t.Errorf("semaphore: most held at once %d counted, %d by the intervals; want 3", ps.MaxCounted, ps.MaxSeen)
	}
	k := ps.Kill
	if k == nil {
		t.Fatal("no permit holder was kill -9ed")
	}
	// The dead permit goes when its lease ends (the interval sweep judges
	// that nobody had it before); roughly, since the lease left is read
	// between the SIGSTOP and the kill, which a busy machine spreads.
	if k.Freed < 0 || k.Freed > k.Bound || k.Freed+500 < k.LeaseLeft || k.LeaseLeft <= 0 {
		t.Errorf("kill: %+v", k)
	}
	t.Logf("%s", res.Verdict)
}

func TestScenarioRWLock(t *testing.T) {
	res := runDemo(t, primRWLock, true, Config{})
	expectPass(t, res)
	ps := res.Prim
	if ps == nil {
		t.Fatal("no summary")
	}
	if ps.Violations != 0 || ps.Overlaps != 0 || ps.FenceRegressions != 0 || res.StaleAccepted != 0 {
		t.Errorf("rwlock: %+v", ps)
	}
	// Readers overlap; every writer got in past them.
	if ps.MaxCounted < 2 || ps.MaxSeen < 2 || ps.Reads == 0 || ps.WritesPerWriterMin == 0 || res.Writes < 2*ps.Writes {
		t.Errorf("rwlock: readers at once %d/%d, reads %d, writes %d (min per writer %d), store writes %d",
			ps.MaxCounted, ps.MaxSeen, ps.Reads, ps.Writes, ps.WritesPerWriterMin, res.Writes)
	}
	t.Logf("%s", res.Verdict)
}

func TestScenarioElection(t *testing.T) {
	res := runDemo(t, primElection, true, Config{})
	expectPass(t, res)
	ps := res.Prim
	if ps == nil {
		t.Fatal("no summary")
	}
	if ps.Violations != 0 || ps.Overlaps != 0 || ps.FenceRegressions != 0 || res.StaleAccepted != 0 {
		t.Errorf("election: %+v", ps)
	}
	if ps.MaxCounted != 1 || ps.MaxSeen != 1 || ps.Handovers == 0 || ps.Observed < 2 || res.Writes == 0 {
		t.Errorf("election: leaders at once %d/%d, hand-overs %d, observed %d, heartbeats %d", ps.MaxCounted, ps.MaxSeen, ps.Handovers, ps.Observed, res.Writes)
	}
	k := ps.Kill
	if k == nil {
		t.Fatal("no leader was kill -9ed")
	}
	// The next leader comes once the dead one's lease is over, not before
	// (the interval sweep judges that); and it does come.
	if k.Next < 0 || k.Next > k.Bound || k.LeaseLeft <= 0 {
		t.Errorf("kill: %+v", k)
	}
	t.Logf("%s", res.Verdict)
}

func TestScenarioJobs(t *testing.T) {
	res := runDemo(t, primJobs, true, Config{Iterations: 4})
	expectPass(t, res)
	ps := res.Prim
	if ps == nil {
		t.Fatal("no summary")
	}
	// Exactly one run per tick, unless a starved scheduler missed a
	// tick's period altogether (noted, not a double run).
	if ps.Ticks != 4 || ps.DoubleRuns != 0 || ps.Runs+ps.Missed != 4 || ps.FenceRegressions != 0 || res.StaleAccepted != 0 {
		t.Errorf("jobs: %+v", ps)
	}
	if ps.PlainRuns < ps.Ticks-ps.Missed {
		t.Errorf("jobs: the plain pattern ran %d times in %d ticks", ps.PlainRuns, ps.Ticks)
	}
	t.Logf("%s", res.Verdict)
}

// primRec is a hold for the analysis tests: worker w's hold of kind with
// fence f from ms a to ms b (Acquire called 1ms before a; a > 1).
func primRec(w int, kind string, f int64, a, b float64) *primHold {
	return &primHold{
		Worker: w, Kind: kind, Fence: f, AcquireStart: int64((a - 1) * 1e6), Acquired: int64(a * 1e6), End: int64(b * 1e6),
		ReleaseEnd: int64((b + 0.1) * 1e6), Entered: true, EnterN: 1,
	}
}

// TestAnalyzePrim checks the judgement on made-up runs: what breaks a rule
// fails, what keeps it passes.
func TestAnalyzePrim(t *testing.T) {
	analyzeOf := func(name string, holds []*primHold, mod func(*primObserved)) *Result {
		sc, _ := Lookup(name)
		plan := planFor(sc)
		res := newResult(sc, plan.procs*plan.perProc, 0)
		res.Prim = &PrimSummary{Kind: sc.Prim, Procs: plan.procs, PerProc: plan.perProc, Permits: plan.permits}
		obs := &primObserved{plan: plan, holds: holds}
		if mod != nil {
			mod(obs)
		}
		analyzePrim(res, obs, 0, 1e12)
		return res
	}
	reasons := func(res *Result) string { return strings.Join(res.Reasons, "; ") }

	// rwlock: two readers overlapping, then a writer alone: PASS.
	read1, read2 := primRec(0, holdRead, 1, 2, 10), primRec(1, holdRead, 2, 5, 12)
	read2.EnterN = 2
	write := primRec(2, holdWrite, 3, 13, 20)
	res := analyzeOf(primRWLock, []*primHold{read1, read2, write}, nil)
	if res.Status != StatusPass || res.Prim.MaxSeen != 2 || res.Prim.MaxCounted != 2 || res.Prim.Writes != 1 {
		t.Errorf("rwlock, good: %s %s %+v", res.Status, reasons(res), res.Prim)
	}
	// A writer beside a reader, in the intervals only: FAIL.
	late := primRec(2, holdWrite, 3, 11, 20)
	if res := analyzeOf(primRWLock, []*primHold{read1, read2, late}, nil); res.Status != StatusFail || res.Prim.Overlaps != 1 || res.Prim.Violations != 0 {
		t.Errorf("rwlock, overlap: %s %s %+v", res.Status, reasons(res), res.Prim)
	} else if want := "worker 1's read (fence 2) 3.000-10.000 ms; worker 2's write (fence 3) 9.000-18.000 ms"; !strings.Contains(reasons(res), want) {
		t.Errorf("rwlock, overlap: the reason %q does not name the holds open then (%q)", reasons(res), want)
	}
	// ... on the server's count only: FAIL.
	counted := primRec(2, holdWrite, 3, 13, 20)
	counted.EnterOther = 1
	if res := analyzeOf(primRWLock, []*primHold{read1, read2, counted}, nil); res.Status != StatusFail || res.Prim.Violations != 1 {
		t.Errorf("rwlock, counted: %s %s %+v", res.Status, reasons(res), res.Prim)
	}

	// semaphore: a fence not above one handed out before the acquire: FAIL.
	if res := analyzeOf(primSemaphore, []*primHold{primRec(0, holdPermit, 5, 2, 3), primRec(1, holdPermit, 4, 10, 12)}, func(o *primObserved) { o.plan.kill = false }); res.Status != StatusFail || res.Prim.FenceRegressions != 1 {
		t.Errorf("semaphore, regression: %s %s %+v", res.Status, reasons(res), res.Prim)
	}
	// ... but acquires that overlap in time may return in either order.
	if res := analyzeOf(primSemaphore, []*primHold{primRec(0, holdPermit, 5, 2, 3), primRec(1, holdPermit, 4, 2.5, 12)}, func(o *primObserved) { o.plan.kill = false }); res.Status != StatusPass {
		t.Errorf("semaphore, concurrent: %s %s", res.Status, reasons(res))
	}
	// A dead permit counts until its lease ends: 3 more at once: FAIL.
	live := []*primHold{primRec(0, holdPermit, 5, 100, 110), primRec(1, holdPermit, 6, 100, 110), primRec(2, holdPermit, 7, 100, 110)}
	res = analyzeOf(primSemaphore, live, func(o *primObserved) {
		o.kill = &primKillRec{proc: 3, stopAt: 50e6, killAt: 60e6, fence: 4, leaseEnds: []int64{105e6}, leaseLeft: 45e6, freedAt: 106e6, recovered: true}
	})
	if res.Status != StatusFail || res.Prim.MaxSeen != 4 || res.Prim.Kill == nil || res.Prim.Kill.Freed != 46 {
		t.Errorf("semaphore, dead permit: %s %s %+v", res.Status, reasons(res), res.Prim)
	}

	// A stopped process ran on a moment after the stop was recorded (a
	// busy master): worker 9 of process 3 let go of its permit after it,
	// then took the one that dies with the process. That permit counts
	// from when it was taken (heldFrom), not from the stop: PASS.
	ranOn := []*primHold{primRec(0, holdPermit, 5, 40, 70), primRec(1, holdPermit, 6, 40, 70), primRec(9, holdPermit, 7, 45, 52)}
	res = analyzeOf(primSemaphore, ranOn, func(o *primObserved) {
		o.kill = &primKillRec{proc: 3, stopAt: 50e6, killAt: 60e6, fence: 8, heldFrom: []int64{54e6}, leaseEnds: []int64{105e6}, leaseLeft: 45e6, freedAt: 106e6, recovered: true}
	})
	if res.Status != StatusPass || res.Prim.MaxSeen != 3 {
		t.Errorf("semaphore, a dead permit taken after the stop: %s %s %+v", res.Status, reasons(res), res.Prim)
	}

	// election: a stale heartbeat accepted, and a leader never replaced.
	l1, l2 := primRec(0, holdLeader, 7, 2, 10), primRec(1, holdLeader, 8, 11, 20)
	l2.Writes = []writeRecord{{Fence: 8, Start: 12e6, End: 13e6, Result: writeOK}}
	l1.Writes = []writeRecord{{Fence: 7, Start: 14e6, End: 15e6, Result: writeOK}}
	res = analyzeOf(primElection, []*primHold{l1, l2}, func(o *primObserved) {
		o.kill = &primKillRec{proc: 2, stopAt: 30e6, killAt: 31e6, fence: 9, leaseEnds: []int64{40e6}, leaseLeft: 9e6}
	})
	if res.Status != StatusFail || res.StaleAccepted != 1 || res.Prim.Handovers != 1 || res.Prim.HandoverP50 != 1 || !strings.Contains(reasons(res), "no other candidate led") {
		t.Errorf("election: %s %s %+v", res.Status, reasons(res), res.Prim)
	}

	// jobs: a tick run twice: FAIL; the plain pattern's are figures.
	res = analyzeOf(primJobs, nil, func(o *primObserved) {
		o.ticks = 3
		o.runs = map[string]string{"0": "1", "1": "2", "2": "1"}
		o.plain = map[string]string{"0": "3", "1": "1", "2": "2"}
	})
	if res.Status != StatusFail || res.Prim.DoubleRuns != 1 || res.Prim.Runs != 4 || res.Prim.PlainRuns != 6 || res.Prim.PlainDoubled != 2 || res.Prim.PlainMaxPerTick != 3 {
		t.Errorf("jobs: %s %s %+v", res.Status, reasons(res), res.Prim)
	}
	// Two runs at once (of different ticks): FAIL; plain runs may.
	runs := []*primHold{primRec(0, holdRun, 1, 2, 10), primRec(1, holdRun, 2, 9, 12), primRec(2, holdPlainRun, 3, 2, 10), primRec(3, holdPlainRun, 4, 5, 10)}
	for _, r := range runs {
		r.Entered, r.EnterN = false, 0 // runs count on their tick, not in a set
	}
	res = analyzeOf(primJobs, runs, func(o *primObserved) {
		o.ticks = 2
		o.runs = map[string]string{"0": "1", "1": "1"}
	})
	if res.Status != StatusFail || res.Prim.Overlaps != 1 || res.Prim.DoubleRuns != 0 || res.Entered != 2 {
		t.Errorf("jobs, overlapping runs: %s %s %+v", res.Status, reasons(res), res.Prim)
	}
}

// A lease read on the server a fraction of a millisecond before the
// millisecond it ends in: the server reports a whole millisecond left, and
// the bound still comes no later than the real end.
func TestLeaseEndAtLeast(t *testing.T) {
	const ms = int64(time.Millisecond)
	end := 1000 * ms // the lease's end on the server, in its milliseconds
	for _, early := range []int64{1, 300_000, 999_999, ms, 5*ms + 1} {
		read := end - early      // when the server read its clock
		left := end - read/ms*ms // what it reports: from its clock rounded down
		before := read - 50_000  // the request was sent 50 µs earlier
		got := leaseEndAtLeast(before, time.Duration(left))
		if got > end {
			t.Errorf("read %d ns before the end: reported %v left, bound %d ns after the end", early, time.Duration(left), got-end)
		}
	}
}

// A lease set (taken or renewed) at some instant and read later: the bound
// comes no earlier than the instant it was set, and at most the reply's
// delay and two milliseconds of rounding later, wherever in their
// milliseconds the server read its clock.
func TestLeaseSetAtMost(t *testing.T) {
	const ms = int64(time.Millisecond)
	const lease = 2000 * ms
	for _, set := range []int64{1000 * ms, 1000*ms + 1, 1000*ms + 999_999} {
		end := set/ms*ms + lease // the server's end: its clock in whole ms, plus the lease
		for _, read := range []int64{set, set + 1, set + 700_000, set + 1500*ms + 3} {
			left := end - read/ms*ms // what the server reports
			after := read + 80_000   // the reply was in 80 µs later
			got := leaseSetAtMost(after, time.Duration(left), time.Duration(lease))
			if got < set {
				t.Errorf("set at %d ns, read at %d: bound %d ns before it was set", set, read, set-got)
			}
			// ... and within the reply's delay and the server's rounding
			// of it, so that a dead hold still counts from about its start.
			if slack := got - set; slack > after-read+2*ms {
				t.Errorf("set at %d ns, read at %d: bound %d ns after it was set", set, read, slack)
			}
		}
	}
}
