package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/cmd/internal/demo"
	"github.com/fencelock/fencelock/testing/leaktest"
	"github.com/fencelock/fencelock/testing/servertest"
)

// TestMain lets the test binary stand in for the fencelock binary: the demo
// starts its workers as "<this binary> demo-worker", and runBinary runs
// main itself (envRunMain).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "demo-worker" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	if os.Getenv(envRunMain) == "1" {
		main()
	}
	leaktest.Main(m)
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string // substrings expected in stdout, stderr
	}{
		{nil, 2, "", "Commands:"},
		{[]string{"-h"}, 0, "demo ", ""},
		{[]string{"help"}, 0, "Commands:", ""},
		{[]string{"help", "demo"}, 0, "--scenario", ""},
		{[]string{"help", "nope"}, 2, "", `unknown command "nope"`},
		// unlock's former name is not listed, but has help.
		{[]string{"help", "force-release"}, 0, "", "Usage: fencelock force-release --yes"},
		{[]string{"help", "demo-worker"}, 2, "", `unknown command "demo-worker"`},
		{[]string{"nope"}, 2, "", `unknown command "nope"`},
		{[]string{"demo", "-h"}, 0, "restart", ""},
		{[]string{"demo", "-h"}, 0, "cluster-failover", ""},
		{[]string{"demo", "-h"}, 0, "--replica-ack", ""},
		{[]string{"demo", "-h"}, 0, "  fair             [2s per mode]", ""},
		{[]string{"demo", "-h"}, 0, "  semaphore        [2s, then a kill]", ""},
		{[]string{"demo", "-h"}, 0, "  jobs             [6 ticks]", ""},
	} {
		code, out, errs := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errs, tc.err) {
			t.Errorf("fencelock %v: exit %d, stdout %q, stderr %q; want exit %d with %q / %q", tc.args, code, out, errs, tc.code, tc.out, tc.err)
		}
	}
	if _, out, _ := runCLI("-h"); strings.Contains(out, "demo-worker") {
		t.Errorf("the hidden worker command is listed:\n%s", out)
	}
}

func TestDemoBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"--scenario", "bogus"}, `invalid --scenario "bogus"`},
		{[]string{"--scenario", "mutex,nope"}, `"nope"`},
		{[]string{"--workers", "1"}, "invalid --workers 1"},
		{[]string{"--workers", "65"}, "invalid --workers 65"},
		{[]string{"--workers", "abc"}, `invalid value "abc" for flag -workers`},
		{[]string{"--iterations", "-1"}, "invalid --iterations -1"},
		{[]string{"--store", "mongo"}, `invalid --store "mongo"`},
		{[]string{"--failovers", "-1"}, "invalid --failovers -1"},
		{[]string{"--failovers", "1001"}, "invalid --failovers 1001"},
		{[]string{"--failovers", "x"}, `invalid value "x" for flag -failovers`},
		{[]string{"--replica-ack", "3"}, "invalid --replica-ack 3"},
		{[]string{"--replica-ack", "-1"}, "invalid --replica-ack -1"},
		{[]string{"--replica-ack-timeout", "0s"}, "invalid --replica-ack-timeout 0s"},
		{[]string{"--replica-ack-timeout", "5s"}, "invalid --replica-ack-timeout 5s"},
		{[]string{"--replica-ack-timeout", "soon"}, `invalid value "soon" for flag -replica-ack-timeout`},
		{[]string{"--scenario", "mutex,crash", "--replica-ack", "1"}, `--replica-ack applies only to the failover scenarios (failover, cluster-failover), and --scenario "mutex,crash" has none`},
		{[]string{"--scenario", "restart", "--failovers", "3", "--replica-ack-timeout", "100ms"}, "--failovers, --replica-ack-timeout apply only"},
		{[]string{"--frobnicate"}, "flag provided but not defined: -frobnicate"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		code, _, errs := runCLI(append([]string{"demo"}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("fencelock demo %v: exit %d, stderr %q; want exit 2 naming %q", tc.args, code, errs, tc.want)
		}
	}
}

func TestWorkerByHand(t *testing.T) {
	t.Setenv(demo.WorkerEnv, "")
	if code, _, _ := runCLI("demo-worker"); code != 2 {
		t.Errorf("demo-worker without its configuration: exit %d, want 2", code)
	}
}

// TestDemoEndToEnd runs the command as a user would, worker processes
// included, against an external redis-server.
func TestDemoEndToEnd(t *testing.T) {
	srv := servertest.Redis(t)
	code, out, errs := runCLI("demo", "--scenario", "mutex,restart", "--workers", "2", "--iterations", "2", "--redis", srv.Addr(), "--json")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	var rep demo.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if !rep.Pass || len(rep.Results) != 2 || rep.Results[0].Status != demo.StatusPass || rep.Results[0].Completed != 4 {
		t.Fatalf("report: %s", out)
	}
	if rep.Results[1].Status != demo.StatusSkip {
		t.Errorf("restart with an external Redis: %s, want SKIP", rep.Results[1].Status)
	}

	code, out, errs = runCLI("demo", "--scenario", "mutex", "--workers", "2", "--iterations", "1", "--redis", "redis://"+srv.Addr()+"/0")
	if code != 0 || !strings.Contains(out, "stale writes accepted") || !strings.Contains(out, "PASS") {
		t.Fatalf("table: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

// Redis unreachable: the demo could not run, exit status 2 (not 1, a FAIL).
func TestDemoUnreachableRedis(t *testing.T) {
	code, _, errs := runCLI("demo", "--scenario", "mutex", "--redis", "127.0.0.1:1")
	if code != 2 || !strings.Contains(errs, "cannot reach Redis") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}
