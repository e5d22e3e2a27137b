package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the test binary serve as the benchmark's worker processes,
// which it starts by re-executing itself.
func TestMain(m *testing.M) {
	if isWorker() {
		workerMain()
		return
	}
	os.Exit(m.Run())
}

// TestQuickRun runs every workload of every library with tiny counts
// against a private redis-server, so that the harness does not rot: every
// job must finish without errors or two holders at once, and the table and
// the plot must come out.
func TestQuickRun(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("FENCELOCK_REQUIRE_SERVERS") == "1" {
			t.Fatal("redis-server not found and FENCELOCK_REQUIRE_SERVERS=1: install it (sudo apt-get install -y redis-server on Debian/Ubuntu, or ../../scripts/setup.sh)")
		}
		t.Skip("redis-server not found")
	}
	dir := t.TempDir()
	o, err := parseFlags([]string{
		"--quick", "--rounds", "1", "--duration", "150ms", "--warmup", "50ms",
		"--procs", "2", "--proc-workers", "2",
		"--held", "20", "--held-ttl", "3s", "--held-renew", "200ms", "--held-window", "700ms", "--probe-every", "20ms",
		"--md", filepath.Join(dir, "results.md"), "--svg", filepath.Join(dir, "results.svg"),
		"--json", filepath.Join(dir, "results.json"), "--quiet",
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := measure(o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ping.OpsPerSec <= 0 {
		t.Errorf("PING: %v/s", rep.Ping.OpsPerSec)
	}
	if len(rep.Results) != len(libraries) {
		t.Fatalf("%d libraries measured, want %d", len(rep.Results), len(libraries))
	}
	for _, res := range rep.Results {
		lib, _ := libraryByName(res.Library)
		for _, w := range workloadDefs {
			f, ok := res.Median[w.name]
			if !lib.runs(w) {
				if ok {
					t.Errorf("%s ran %s", res.Library, w.name)
				}
				continue
			}
			if !ok {
				t.Errorf("%s %s: not measured", res.Library, w.name)
				continue
			}
			if f.Violations > 0 {
				t.Errorf("%s %s: %d times two holders at once", res.Library, w.name, f.Violations)
			}
			switch {
			case f.Errors > 0 && isFencelock(res.Library):
				t.Errorf("%s %s: %d errors, the first: %s", res.Library, w.name, f.Errors, f.FirstError)
			case f.Errors > 0:
				// A peer's waiter that misses its wake-up can wait out the
				// request timeout (rueidislock across processes, on a
				// loaded machine): the run reports it, it is not the
				// harness's failure.
				t.Logf("%s %s: %d errors, the first: %s", res.Library, w.name, f.Errors, f.FirstError)
			}
			if f.Ops == 0 {
				t.Errorf("%s %s: nothing done", res.Library, w.name)
			}
			switch w.name {
			case "serial":
				if f.Commands <= 0 || f.ClientCPUus <= 0 {
					t.Errorf("%s serial: %v commands, %v µs client CPU per cycle", res.Library, f.Commands, f.ClientCPUus)
				}
			case "contended-procs":
				if f.MinPerWorker == 0 && f.MaxPerWorker == 0 {
					t.Errorf("%s contended-procs: no acquisitions counted per worker", res.Library)
				}
			case "held":
				if f.HeldLocks != 20 || f.Lost != 0 || f.Goroutines == 0 {
					t.Errorf("%s held: %v locks, %v lost, %v goroutines", res.Library, f.HeldLocks, f.Lost, f.Goroutines)
				}
			}
		}
	}
	if err := publish(o, rep, devNull(t)); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fencelock ÷ best peer", "2×PING bound", "hand-offs/s", "20 held locks",
		"fenced-floor, the least", "fair-floor, the least"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "results.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "rueidislock") {
		t.Errorf("results.svg does not look like the plot:\n%.300s", svg)
	}
	var back report
	data, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
}

func devNull(t *testing.T) *os.File {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFormat(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 4970: "4,970", 1234567: "1,234,567"} {
		if got := count(v); got != want {
			t.Errorf("count(%v) = %q, want %q", v, got, want)
		}
	}
	for ms, want := range map[float64]string{0.117: "117 µs", 3.44: "3.4 ms", 108: "108 ms", 1500: "1.5 s", 12000: "12 s"} {
		if got := duration(ms); got != want {
			t.Errorf("duration(%v) = %q, want %q", ms, got, want)
		}
	}
	for _, c := range []struct {
		a, b float64
		want string
	}{{1, 2, "0.50×"}, {4, 9943, "0.0004×"}, {4, 100005, "0.00004×"}, {0, 3, "0×"}, {30, 2, "15×"}, {0, 0, "–"}, {1, 0, "∞"}} {
		if got := ratioCell(c.a, c.b); got != c.want {
			t.Errorf("ratioCell(%v, %v) = %q, want %q", c.a, c.b, got, c.want)
		}
	}
}
