package demo

import (
	"bytes"
	"strings"
	"testing"
)

// The table's header names a worker count only when every scenario shown
// ran it: the fair and primitive scenarios run counts of their own, which
// the header used to misstate as --workers.
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
