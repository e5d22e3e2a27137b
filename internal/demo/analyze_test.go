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
