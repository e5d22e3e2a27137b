package demo

import (
	"bytes"
	"strings"
	"testing"
)

// The table's header names a worker count only when every scenario shown
// ran it: the fair and primitive scenarios run counts of their own, which
// the header must not state as --workers.
func TestTableHeaderWorkers(t *testing.T) {
	header := func(results ...*Result) string {
		rep := &Report{Redis: "127.0.0.1:6379", Workers: 8, Results: results}
		var b bytes.Buffer
		if err := rep.WriteTable(&b); err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(b.String(), "\n")
		return first
	}
	mutex := &Result{Scenario: "mutex", Status: StatusPass, Workers: 8, Iterations: 10}
	if got := header(mutex); !strings.Contains(got, "8 worker processes contend") {
		t.Errorf("mutex alone: header %q, want the count 8", got)
	}
	fair := &Result{Scenario: "fair", Status: StatusPass, Workers: 4, Fair: &FairSummary{Procs: 4, PerProc: 4}}
	prim := &Result{Scenario: "semaphore", Status: StatusPass, Workers: 8, Prim: &PrimSummary{Procs: 2, PerProc: 4}}
	for _, other := range []*Result{fair, prim} {
		if got := header(mutex, other); strings.Contains(got, "8 worker") || !strings.Contains(got, "workers row") {
			t.Errorf("mutex and %s: header %q, want no count, a pointer to the workers row", other.Scenario, got)
		}
	}
	skipped := &Result{Scenario: "fair", Status: StatusSkip, Workers: 4, Fair: &FairSummary{}}
	if got := header(mutex, skipped); !strings.Contains(got, "8 worker processes contend") {
		t.Errorf("mutex and a skipped fair: header %q, want the count 8", got)
	}
}

// A killed process's permit that its own release freed at the stop (the
// release was on the way) ends, in the hold intervals, no later than the
// last read that found it, not at the lease end read after the stop:
// otherwise a waiter that took the freed permit counted as one holder too
// many (TestScenarioSemaphore failed once so under stress-ng).
func TestNotePermits(t *testing.T) {
	const stopAt, lease = int64(1_000), int64(2_000_000_000)
	k := &primKillRec{stopAt: stopAt, tokens: []string{"a", "b"}, leaseEnds: []int64{stopAt + lease, stopAt + lease}}
	if k.notePermits(stopAt+10, []float64{0, 5}) {
		t.Fatal("all gone, with b still there")
	}
	if k.leaseEnds[0] != stopAt {
		t.Errorf("a, gone at the first read: ends at %d, want the stop (%d)", k.leaseEnds[0], stopAt)
	}
	if k.leaseEnds[1] != stopAt+lease {
		t.Errorf("b, still there: ends at %d, want its lease end %d", k.leaseEnds[1], stopAt+lease)
	}
	if !k.notePermits(stopAt+lease+50, []float64{0, 0}) {
		t.Fatal("not all gone, with both gone")
	}
	// Gone later: it ends no later than the last read that found it (a
	// lower bound, like the lease end: polling every 10ms, the two are
	// close when it lapses).
	if k.leaseEnds[1] != stopAt+10 {
		t.Errorf("b, gone at the second read: ends at %d, want the last read that found it (%d)", k.leaseEnds[1], stopAt+10)
	}

	// Gone before its lease end, after a read found it: the end is that read.
	k = &primKillRec{stopAt: stopAt, tokens: []string{"c"}, leaseEnds: []int64{stopAt + lease}}
	k.notePermits(stopAt+20, []float64{7})
	k.notePermits(stopAt+30, []float64{0})
	if k.leaseEnds[0] != stopAt+20 {
		t.Errorf("c: ends at %d, want the last read that found it (%d)", k.leaseEnds[0], stopAt+20)
	}
}
