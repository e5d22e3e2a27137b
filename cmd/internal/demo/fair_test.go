package demo

import (
	"strings"
	"testing"

	"github.com/fencelock/fencelock/driver"
)

// TestScenarioFair runs the fair scenario with its real worker processes
// (4 × 4 goroutines) against an external redis-server: no overlap, no
// stale write, fences rising, every goroutine served in both modes, and a
// process kill -9ed in line holds the line up no longer than its places'
// lease (plus the scenario's margin). The fairness and wait figures are
// logged, not asserted: a busy machine moves them.
func TestScenarioFair(t *testing.T) {
	res := runDemo(t, "fair", true, Config{})
	expectPass(t, res)
	fs := res.Fair
	if fs == nil {
		t.Fatal("no fair summary")
	}
	if res.MaxConcurrent != 1 || res.Violations != 0 || res.StaleAttempted != 0 || res.StaleAccepted != 0 || fs.FenceRegressions != 0 || res.Failed != 0 {
		t.Errorf("fair: max concurrent %d, violations %d, stale %d/%d, fence regressions %d, failed %d",
			res.MaxConcurrent, res.Violations, res.StaleAttempted, res.StaleAccepted, fs.FenceRegressions, res.Failed)
	}
	for _, fr := range []FairRun{fs.Plain, fs.Fair} {
		if fr.Acquisitions == 0 || len(fr.PerWorker) != fairProcs*fairPerProc || fr.WaitP99 < fr.WaitP50 || fr.PerSecond <= 0 || fr.Hold <= 0 {
			t.Errorf("%s: %+v", fr.Mode, fr)
		}
	}
	// In line, nobody starves: every goroutine had turns.
	if fs.Fair.PerWorkerMin == 0 {
		t.Errorf("fair: a goroutine never had the lock: %v", fs.Fair.PerWorker)
	}
	k := fs.Kill
	if k == nil {
		t.Fatal("no process was kill -9ed in line")
	}
	if k.InLine != fairPerProc || k.Place < 1 || k.Next < 0 || k.Handoffs == 0 || k.Stall > k.Bound || k.Left != 0 {
		t.Errorf("kill: %+v", k)
	}
	if res.Verdict == "" || !strings.Contains(res.Verdict, "WithFairness") {
		t.Errorf("verdict: %q", res.Verdict)
	}
	t.Logf("plain: min/max %.2f, p99 %v (%.1fx ideal), %.0f/s; fair: min/max %.2f, p99 %v (%.1fx ideal), %.0f/s; kill: next %v, stall %v",
		fs.Plain.MinMax, fs.Plain.WaitP99, fs.Plain.P99VsIdeal, fs.Plain.PerSecond,
		fs.Fair.MinMax, fs.Fair.WaitP99, fs.Fair.P99VsIdeal, fs.Fair.PerSecond, k.Next, k.Stall)
}

// fairRec is an acquisition for the analysis tests: worker w acquired fence
// f at ms a (Acquire called 4.5 ms before), held for 1 ms.
func fairRec(w, iter int, f int64, a float64) *iterRecord {
	at := int64(a * 1e6)
	return &iterRecord{
		Worker: w, Iter: iter, Fence: f, AcquireStart: at - 45e5, Acquired: at,
		EnterRan: true, EnterN: 1, ExitRan: true, Exited: at + 1e6, ReleaseStart: at + 1e6, ReleaseEnd: at + 1e6 + 1e5,
		Released: true, Outcome: outcomeCompleted,
	}
}

// TestAnalyzeFair checks the fair scenario's judgement on made-up runs: a
// stall within the places' lease passes, a longer one is a lost hand-off,
// a fence that goes back fails, and the figures add up.
func TestAnalyzeFair(t *testing.T) {
	sc, _ := Lookup("fair")
	const ms = int64(1e6)
	run := func(stallMs float64, regress bool) *Result {
		recs := map[recKey]*iterRecord{}
		add := func(r *iterRecord) { recs[recKey{r.Worker, r.Iter}] = r }
		f := int64(100)
		// plain (0-100 ms) and fair (100-200 ms): 2 workers alternating
		// every 5 ms; worker 0 gets one more turn in plain.
		for i := range 20 {
			add(fairRec(i%2, i, f, float64(5+5*i)))
			f++
		}
		add(fairRec(0, 100, f, 102))
		f++
		for i := range 20 {
			add(fairRec(i%2, 20+i, f, float64(105+5*i)))
			f++
		}
		// kill run (200 ms on), killed at 210 ms: one acquisition before,
		// then one stallMs after the kill, then another.
		add(fairRec(0, 40, f, 205))
		add(fairRec(0, 41, f+1, 210+stallMs))
		last := f + 2
		if regress {
			last = f
		}
		add(fairRec(1, 42, last, 215+stallMs))
		obs := &fairObserved{
			runs: []fairRunWindow{
				{mode: fairModePlain, start: 0, end: 100 * ms},
				{mode: fairModeFair, start: 100 * ms, end: 200 * ms},
				{mode: fairModeFair, kill: true, start: 200 * ms, end: 10000 * ms},
			},
			kill: &fairKillRec{proc: 1, stopAt: 210 * ms, inLine: 4, lineLen: 14, place: 2},
		}
		res := newResult(sc, fairProcs, 0)
		analyze(res, analysisInput{
			sc: sc, workers: 2, recs: recs, killedAt: map[int]int64{}, doneWorkers: map[int]bool{0: true, 1: true},
			end: 10000 * ms, fair: obs,
		})
		return res
	}

	res := run(1500, false)
	if res.Status != StatusPass {
		t.Fatalf("a 1.5s stall: %s %v", res.Status, res.Reasons)
	}
	fs := res.Fair
	if fs.Plain.Acquisitions != 21 || fs.Fair.Acquisitions != 20 || fs.Plain.PerWorkerMin != 10 || fs.Plain.PerWorkerMax != 11 || fs.Fair.MinMax != 1 {
		t.Errorf("figures: plain %+v, fair %+v", fs.Plain, fs.Fair)
	}
	if fs.Fair.Hold != 1 || fs.Fair.Ideal != 1 || fs.Fair.WaitP99 != 4.5 || fs.Fair.HandoffP50 != 4 {
		t.Errorf("fair: hold %v, ideal %v, p99 %v, hand-off p50 %v", fs.Fair.Hold, fs.Fair.Ideal, fs.Fair.WaitP99, fs.Fair.HandoffP50)
	}
	k := fs.Kill
	if k == nil || k.Next != 1500 || k.Stall != 1500 || k.Handoffs != 2 {
		t.Errorf("kill: %+v", k)
	}

	if res := run(float64(driver.PlaceLease/1e6+fairStallMargin/1e6+100), false); res.Status != StatusFail || !strings.Contains(strings.Join(res.Reasons, " "), "hand-off lost") {
		t.Errorf("a stall past the bound: %s %v", res.Status, res.Reasons)
	}
	if res := run(100, true); res.Status != StatusFail || res.Fair.FenceRegressions != 1 {
		t.Errorf("a fence regression: %s %v", res.Status, res.Reasons)
	}
}
