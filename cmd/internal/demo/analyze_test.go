package demo

import (
	"strings"
	"testing"
	"time"
)

func TestMaxOverlap(t *testing.T) {
	for _, tc := range []struct {
		name string
		ivs  []interval
		want int
	}{
		{"none", nil, 0},
		{"one", []interval{{0, 10}}, 1},
		{"back to back", []interval{{0, 10}, {10, 20}, {20, 30}}, 1},
		{"apart", []interval{{0, 10}, {11, 20}}, 1},
		{"two overlap", []interval{{0, 10}, {9, 20}}, 2},
		{"nested three", []interval{{0, 100}, {10, 90}, {20, 30}, {40, 50}}, 3},
	} {
		if got := maxOverlap(tc.ivs); got != tc.want {
			t.Errorf("%s: maxOverlap = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestStaleWrites(t *testing.T) {
	w := func(fence, start, end int64, result string) writeRecord {
		return writeRecord{Fence: fence, Start: start, End: end, Result: result}
	}
	for _, tc := range []struct {
		name                                     string
		writes                                   []writeRecord
		attempted, accepted, errors, unexplained int
	}{
		{"in order", []writeRecord{w(1, 0, 1, writeOK), w(1, 2, 3, writeOK), w(2, 4, 5, writeOK)}, 0, 0, 0, 0},
		{"refused late write", []writeRecord{w(2, 0, 1, writeOK), w(1, 2, 3, writeStale)}, 1, 0, 0, 0},
		{"accepted late write is caught", []writeRecord{w(2, 0, 1, writeOK), w(1, 2, 3, writeOK)}, 1, 1, 0, 0},
		// Overlapping in time: the store may have ordered them either way.
		{"overlapping writes are not blamed", []writeRecord{w(2, 0, 10, writeOK), w(1, 5, 6, writeOK)}, 0, 0, 0, 0},
		{"refusal without a newer write seen", []writeRecord{w(1, 0, 1, writeStale)}, 1, 0, 0, 1},
		{"errors", []writeRecord{w(1, 0, 1, writeError)}, 0, 0, 1, 0},
	} {
		st := staleWrites(tc.writes)
		if st.attempted != tc.attempted || st.accepted != tc.accepted || st.errors != tc.errors || st.unexplained != tc.unexplained {
			t.Errorf("%s: got attempted %d accepted %d errors %d unexplained %d, want %d %d %d %d", tc.name,
				st.attempted, st.accepted, st.errors, st.unexplained, tc.attempted, tc.accepted, tc.errors, tc.unexplained)
		}
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	if got := percentile(xs, 50); got != 3 {
		t.Errorf("p50 = %v", got)
	}
	if got := percentile(xs, 99); got != 5 {
		t.Errorf("p99 = %v", got)
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v", got)
	}
}

// TestAnalyzeMutex feeds analyze a clean run and one with an overlap that
// only the clock shows (the counter did not see it).
func TestAnalyzeMutex(t *testing.T) {
	sc, _ := Lookup("mutex")
	ms := int64(time.Millisecond)
	clean := func() map[recKey]*iterRecord {
		recs := map[recKey]*iterRecord{}
		for i := 0; i < 4; i++ {
			at := int64(i) * 100 * ms
			recs[recKey{i % 2, i / 2}] = &iterRecord{
				Worker: i % 2, Iter: i / 2, Fence: int64(1000 + i), Acquired: at, Exited: at + 50*ms,
				ReleaseStart: at + 50*ms, Released: true, EnterRan: true, EnterN: 1, ExitRan: true, ExitN: 0,
				Writes: []writeRecord{
					{Phase: "enter", Fence: int64(1000 + i), Start: at + ms, End: at + 2*ms, Result: writeOK},
					{Phase: "exit", Fence: int64(1000 + i), Start: at + 40*ms, End: at + 41*ms, Result: writeOK},
				},
				Outcome: outcomeCompleted,
			}
		}
		return recs
	}
	in := analysisInput{sc: sc, workers: 2, iterations: 2, recs: clean(), doneWorkers: map[int]bool{0: true, 1: true}, storeToken: 1003}
	res := newResult(sc, 2, 2)
	analyze(res, in)
	if res.Status != StatusPass || res.MaxConcurrent != 1 || res.Handoffs != 3 || res.FenceMin != 1000 || res.FenceMax != 1003 {
		t.Fatalf("clean run: %+v", res)
	}
	if res.HandoffP50 != 50 { // release at +50ms, next acquisition at +100ms
		t.Errorf("hand-off p50 = %v, want 50ms", res.HandoffP50)
	}

	in.recs = clean()
	in.recs[recKey{1, 0}].Exited = 250 * ms // acquired at 100ms, holds past the next acquisition at 200ms
	res = newResult(sc, 2, 2)
	analyze(res, in)
	if res.Status != StatusFail || res.MaxConcurrent != 2 || !strings.Contains(strings.Join(res.Reasons, "\n"), "overlapped") {
		t.Fatalf("overlap not reported: %+v", res)
	}
}

// ms is a millisecond on the mono clock of the synthetic runs below, which
// start at synthT0.
const (
	ms      = int64(time.Millisecond)
	synthT0 = 10_000 * ms
)

// at is t milliseconds into a synthetic run.
func at(t int64) int64 { return synthT0 + t*ms }

// synthHold is one iteration of a synthetic run: held from acq to exit (ms
// into the run), with the given INCR and DECR results, an enter write just
// after acq and an exit write just before exit, both accepted.
func synthHold(worker, iter int, fence, acq, exit, incr, decr int64) *iterRecord {
	return &iterRecord{
		Worker: worker, Iter: iter, Fence: fence, AcquireStart: at(acq) - ms, Acquired: at(acq), Exited: at(exit),
		ReleaseStart: at(exit), Released: true, EnterRan: true, EnterN: incr, ExitRan: true, ExitN: decr,
		Writes: []writeRecord{
			{Phase: "enter", Fence: fence, Start: at(acq) + ms, End: at(acq) + 2*ms, Result: writeOK},
			{Phase: "exit", Fence: fence, Start: at(exit) - 2*ms, End: at(exit) - ms, Result: writeOK},
		},
		Outcome: outcomeCompleted,
	}
}

// refused makes r's exit write one the store refused, holding current.
func refused(r *iterRecord, current int64) *iterRecord {
	r.Writes[1].Result, r.Writes[1].Current = writeStale, current
	return r
}

// synthRun is a synthetic run of the holds (each worker's iterations
// 0..n-1), after tweak replaced or changed some of them.
func synthRun(name string, workers, iterations int, holds []*iterRecord, tweak []*iterRecord) analysisInput {
	sc, _ := Lookup(name)
	recs := map[recKey]*iterRecord{}
	for _, r := range append(holds, tweak...) {
		recs[recKey{r.Worker, r.Iter}] = r
	}
	done := map[int]bool{}
	for w := 0; w < workers; w++ {
		done[w] = true
	}
	var last int64
	for _, r := range recs {
		last = max(last, r.Fence)
	}
	return analysisInput{
		sc: sc, workers: workers, iterations: iterations, t0: synthT0, end: at(5000), recs: recs,
		doneWorkers: done, storeToken: last,
	}
}

// pauseRun is a pause run of 4 workers x 2 iterations. Worker 0, holding
// fence 10 from 101ms, is SIGSTOPped at 200ms and resumed at 1200ms; worker
// 1 has the lock from 700ms (its INCR sees the stopped holder: 2), worker 2
// after it; worker 0's late exit write is refused and its DECR sees worker
// 2. Before and after that, the holds follow one another. tweak replaces
// holds (by worker and iteration).
func pauseRun(tweak ...*iterRecord) analysisInput {
	paused := refused(synthHold(0, 0, 10, 101, 1203, 1, 1), 12)
	paused.Writes[1].Start, paused.Writes[1].End = at(1201), at(1202)
	paused.LostBeforeRelease, paused.LostAtEnd, paused.Released = true, true, false
	in := synthRun("pause", 4, 2, []*iterRecord{
		synthHold(3, 0, 9, 0, 100, 1, 0),
		paused,
		synthHold(1, 0, 11, 700, 1000, 2, 1),
		synthHold(2, 0, 12, 1001, 1300, 2, 0),
		synthHold(0, 1, 13, 1900, 2000, 1, 0),
		synthHold(3, 1, 14, 2001, 2100, 1, 0),
		synthHold(1, 1, 15, 2101, 2200, 1, 0),
		synthHold(2, 1, 16, 2201, 2300, 1, 0),
	}, tweak)
	in.pausesPlanned = 1
	in.pauses = []pauseRec{{Worker: 0, Pid: 100, Fence: 10, Start: at(200), End: at(1200), Free: at(690)}}
	return in
}

func analyzeRun(in analysisInput) *Result {
	res := newResult(in.sc, in.workers, in.iterations)
	analyze(res, in)
	return res
}

func wantStatus(t *testing.T, name string, res *Result, status string, reasons ...string) {
	t.Helper()
	all := strings.Join(res.Reasons, "\n")
	if res.Status != status {
		t.Errorf("%s: %s, want %s; reasons: %q; notes: %q", name, res.Status, status, res.Reasons, res.Notes)
		return
	}
	for _, want := range reasons {
		if !strings.Contains(all, want) {
			t.Errorf("%s: reasons %q do not mention %q", name, res.Reasons, want)
		}
	}
}

// TestAnalyzePause checks that only overlap with a paused holder, after
// its SIGSTOP, is excused.
func TestAnalyzePause(t *testing.T) {
	// Only the paused holder overlaps others: PASS.
	res := analyzeRun(pauseRun())
	wantStatus(t, "paused holder only", res, StatusPass)
	if res.MaxConcurrent != 2 || res.Violations != 4 || res.StaleAttempted != 1 {
		t.Errorf("paused holder only: max concurrent %d, violations %d, stale %d, want 2, 4, 1", res.MaxConcurrent, res.Violations, res.StaleAttempted)
	}

	// Workers 1 and 2, never paused, hold together at 2.2-2.25s.
	res = analyzeRun(pauseRun(refused(synthHold(1, 1, 15, 2101, 2250, 1, 1), 16), synthHold(2, 1, 16, 2200, 2300, 2, 0)))
	wantStatus(t, "unpaused overlap", res, StatusFail, "2 holders overlapped", "2 violations")

	// The same overlap seen by the clock only (the counter missed it) ...
	res = analyzeRun(pauseRun(refused(synthHold(1, 1, 15, 2101, 2250, 1, 0), 16), synthHold(2, 1, 16, 2200, 2300, 1, 0)))
	wantStatus(t, "unpaused overlap, clock only", res, StatusFail, "2 holders overlapped")

	// ... and a violation seen by the counter only, long after the pause.
	res = analyzeRun(pauseRun(synthHold(2, 1, 16, 2201, 2300, 2, 0)))
	wantStatus(t, "unpaused violation, counter only", res, StatusFail, "1 violations")

	// Worker 1, never paused, was not run from 2110ms to 2700ms (590ms,
	// more than the 350ms its lease can bridge: 500ms less the 150ms
	// renewal interval), and held on until 2710ms, while worker 2 had the
	// lock from 2620ms: an involuntary pause, excused from its start, with
	// a note. Shorter (300ms), or beginning after the overlap did, it
	// excuses nothing.
	stalled := func(from, dur int64) *iterRecord {
		r := refused(synthHold(1, 1, 15, 2101, 2710, 1, 1), 16)
		r.StallFrom, r.StallFor = at(from), dur*ms
		r.ToldAt, r.LostBeforeRelease, r.LostAtEnd = at(2705), true, true
		return r
	}
	next := synthHold(2, 1, 16, 2620, 2800, 2, 0)
	res = analyzeRun(pauseRun(stalled(2110, 590), next))
	wantStatus(t, "stalled holder", res, StatusPass)
	if !strings.Contains(strings.Join(res.Notes, "\n"), "worker 1 (fence 15), not one the demo paused, went 590ms without being run") {
		t.Errorf("stalled holder: no note of the stall; notes: %q", res.Notes)
	}
	res = analyzeRun(pauseRun(stalled(2110, 300), next))
	wantStatus(t, "short stall", res, StatusFail, "2 holders overlapped", "2 violations")
	res = analyzeRun(pauseRun(stalled(2650, 590), next))
	wantStatus(t, "stall after the overlap began", res, StatusFail, "2 holders overlapped")

	// The paused holder overlapping another before its SIGSTOP is not
	// excused either.
	in := pauseRun(refused(synthHold(3, 0, 9, 0, 150, 1, 1), 10))
	in.recs[recKey{0, 0}].EnterN = 2
	res = analyzeRun(in)
	wantStatus(t, "overlap before the pause", res, StatusFail, "2 holders overlapped", "2 violations")
}

// restartRun is a restart run of 3 workers x 2 iterations: worker 1 holds
// fence 11 from 300ms; redis-server is kill -9ed at 366ms and answers again
// at 620ms; worker 1, its exit refused in the new epoch, holds until 800ms,
// while worker 2 has the lock from 630ms. The other holds follow one
// another. tweak replaces holds (by worker and iteration).
func restartRun(tweak ...*iterRecord) analysisInput {
	spanning := refused(synthHold(1, 0, 11, 300, 800, 1, 0), 5000)
	spanning.ExitRan, spanning.Released = false, false
	spanning.LostBeforeRelease, spanning.LostAtEnd = true, true
	spanning.Outcome, spanning.Err = outcomeInterrupted, "exit: redis-server was restarted"
	in := synthRun("restart", 3, 2, []*iterRecord{
		synthHold(0, 0, 10, 0, 200, 1, 0),
		spanning,
		synthHold(2, 0, 5000, 630, 830, 1, 0),
		synthHold(0, 1, 5001, 831, 1031, 1, 0),
		synthHold(2, 1, 5002, 1032, 1232, 1, 0),
		synthHold(1, 1, 5003, 1233, 1433, 1, 0),
	}, tweak)
	in.restart = &restartRec{Killed: at(366), Up: at(620), Epoch: at(625)}
	return in
}

// TestAnalyzeRestart checks that only overlap with a hold that spanned the
// restart is excused.
func TestAnalyzeRestart(t *testing.T) {
	res := analyzeRun(restartRun())
	wantStatus(t, "spanning hold only", res, StatusPass)
	if res.MaxConcurrent != 2 || res.Interrupted != 1 || res.Restart == nil || res.Restart.FenceBefore != 11 || res.Restart.FenceAfter != 5000 {
		t.Errorf("spanning hold only: max concurrent %d, interrupted %d, restart %+v", res.MaxConcurrent, res.Interrupted, res.Restart)
	}

	// Workers 0 and 2 hold together after the restart, at 1.0-1.05s.
	res = analyzeRun(restartRun(refused(synthHold(0, 1, 5001, 831, 1050, 1, 1), 5002), synthHold(2, 1, 5002, 1000, 1232, 2, 0)))
	wantStatus(t, "overlap after the restart", res, StatusFail, "2 holders overlapped", "2 violations")

	res = analyzeRun(restartRun(synthHold(2, 1, 5002, 1032, 1232, 2, 0)))
	wantStatus(t, "violation after the restart, counter only", res, StatusFail, "1 violations")

	// Before the kill, the spanning hold must not overlap anyone.
	res = analyzeRun(restartRun(refused(synthHold(0, 0, 10, 0, 350, 1, 1), 11)))
	wantStatus(t, "overlap before the kill", res, StatusFail, "2 holders overlapped", "1 violations")
}

// wantNote checks that some note of res mentions each of notes.
func wantNote(t *testing.T, name string, res *Result, notes ...string) {
	t.Helper()
	all := strings.Join(res.Notes, "\n")
	for _, want := range notes {
		if !strings.Contains(all, want) {
			t.Errorf("%s: notes %q do not mention %q", name, res.Notes, want)
		}
	}
}

// crashRun is a crash run of 3 workers x 2 iterations: worker 1, holding
// fence 11 from 101ms, is killed -9 at 150ms; the lock is free again at
// 1050ms and worker 2 takes it (fence 12) at 1100ms. tweak replaces holds;
// kill changes the kill.
func crashRun(kill func(*killRec), tweak ...*iterRecord) analysisInput {
	killed := synthHold(1, 0, 11, 101, 150, 1, 0)
	killed.Outcome, killed.Released = "", false // cut short by the kill
	in := synthRun("crash", 3, 2, []*iterRecord{
		synthHold(0, 0, 10, 0, 100, 1, 0),
		killed,
		synthHold(2, 0, 12, 1100, 1200, 1, 0),
		synthHold(0, 1, 13, 1201, 1300, 1, 0),
		synthHold(2, 1, 14, 1301, 1400, 1, 0),
	}, tweak)
	k := killRec{Worker: 1, Fence: 11, At: at(150), HeldAtKill: true, Free: at(1050)}
	if kill != nil {
		kill(&k)
	}
	in.kills, in.killsPlanned = []killRec{k}, 1
	in.killedAt = map[int]int64{1: k.At}
	return in
}

// TestAnalyzeCrash checks the crash scenario's judgement of each kill: the
// lock free again within the lease, taken over, the survivors done.
func TestAnalyzeCrash(t *testing.T) {
	res := analyzeRun(crashRun(nil))
	wantStatus(t, "holder killed, lock taken over", res, StatusPass)
	wantNote(t, "holder killed, lock taken over", res, "worker 1 (fence 11) kill -9ed at 150ms while holding")
	if res.Killed != 1 || len(res.Kills) != 1 || res.Kills[0].Free != 900 || res.Kills[0].Takeover != 950 {
		t.Errorf("holder killed: killed %d, kills %+v, want 1, free after 900ms, taken over after 950ms", res.Killed, res.Kills)
	}

	res = analyzeRun(crashRun(func(k *killRec) { k.Free = at(1650) }))
	wantStatus(t, "free too late", res, StatusFail, "lock of killed worker 1 free again after 1.50s")

	res = analyzeRun(crashRun(func(k *killRec) { k.Fence = 14 }))
	wantStatus(t, "never taken over", res, StatusFail, "no worker took the lock over after worker 1 was killed")

	res = analyzeRun(crashRun(func(k *killRec) { k.HeldAtKill = false }))
	wantStatus(t, "killed after its release", res, StatusFail, "no holder was killed while holding the lock")
	wantNote(t, "killed after its release", res, "worker 1 was killed just after it released the lock (not counted)")

	in := crashRun(nil)
	delete(in.recs, recKey{2, 1})
	res = analyzeRun(in)
	wantStatus(t, "a survivor short of iterations", res, StatusFail, "surviving worker 2 completed 1 of 2 iterations")

	res = analyzeRun(crashRun(nil, synthHold(2, 0, 12, 1100, 1200, 2, 0)))
	wantStatus(t, "two inside", res, StatusFail, "1 violations of mutual exclusion")
}

// TestAnalyzeExpiry checks that the expiry scenario fails a run in which no
// holder outlived its lease.
func TestAnalyzeExpiry(t *testing.T) {
	res := analyzeRun(synthRun("expiry", 2, 1, []*iterRecord{
		synthHold(0, 0, 10, 0, 100, 1, 0),
		synthHold(1, 0, 11, 101, 200, 1, 0),
	}, nil))
	wantStatus(t, "no expiry", res, StatusFail, "no violation: holders outliving", "no stale write", "only 0 of 2 holders")
	wantNote(t, "no expiry", res, "expiry: workers ignored 0 loss signals")
}

// TestAnalyzeSafeRestart checks a backend that must keep mutual exclusion
// across a restart (and, with KeepsLocks, the lock held across it).
func TestAnalyzeSafeRestart(t *testing.T) {
	safe := func(keeps bool, holder int64, tweak ...*iterRecord) analysisInput {
		in := restartRun(tweak...)
		in.sc.RestartSafe, in.sc.KeepsLocks = true, keeps
		in.restart.What, in.restart.HolderFence = "3 etcd members", holder
		return in
	}
	// The hold that spanned the restart (fence 11) overlapped a later one:
	// nothing is excused, and who overlapped whom is told.
	res := analyzeRun(safe(true, 11))
	wantStatus(t, "lock lost across the restart", res, StatusFail, "2 holders overlapped", "the lock held across the restart (fence 11) was lost: its holder was told during its hold")
	wantNote(t, "lock lost across the restart", res, "restart: worker 1 (fence 11;", "overlapped worker 2 (fence 5000;")

	// Held by no one across it, and no overlap.
	spanning := synthHold(1, 0, 11, 300, 360, 1, 0)
	res = analyzeRun(safe(true, 0, spanning))
	wantStatus(t, "no lock across the restart", res, StatusPass)
	wantNote(t, "no lock across the restart", res, "the holder left before the kill")

	// Lost, but that is allowed without KeepsLocks, and no one else had it.
	lost := synthHold(1, 0, 11, 300, 600, 1, 0)
	lost.LostBeforeRelease, lost.LostErr = true, "renewal found it gone"
	res = analyzeRun(safe(false, 11, lost))
	wantStatus(t, "lost without KeepsLocks", res, StatusPass)
	wantNote(t, "lost without KeepsLocks", res, "(fence 11) was lost (its holder was told during its hold: renewal found it gone)")

	// Kept: still held by fence 11 when the servers answered again.
	kept := synthHold(1, 0, 11, 300, 600, 1, 0)
	in := safe(true, 11, kept)
	in.restart.HeldAfter = true
	res = analyzeRun(in)
	wantStatus(t, "kept across the restart", res, StatusPass)
	wantNote(t, "kept across the restart", res, "(fence 11) was kept: its holder was told of no loss, the lock still carried its fence")
}
