package demo

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/testing/servertest"
)

// "fencelock demo --backend redlock" end to end: 3 real redis-servers as
// independent masters, real worker processes, the crash scenario (holders
// kill -9ed mid-hold: their lock is free on a majority within the lease,
// plus the node timeout, and another worker takes it). The fair lock is
// skipped, naming what redlock lacks.
func TestMainRedlockCrash(t *testing.T) {
	srv := servertest.Redis(t) // the checks' Redis; skips (or fails) without redis-server
	var stdout, stderr bytes.Buffer
	code := Main([]string{"--backend", "redlock", "--masters", "3", "--scenario", "crash,fair",
		"--workers", "3", "--iterations", "3", "--redis", srv.Addr(), "--json"},
		&stdout, &stderr, MainOptions{WorkerCommand: []string{os.Args[0]}})
	t.Logf("stderr:\n%s", stderr.String())
	if code != 0 {
		t.Fatalf("exit %d; stdout:\n%s", code, stdout.String())
	}
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if !strings.Contains(rep.Backend, "redlock over 3") || len(rep.Results) != 2 {
		t.Fatalf("backend %q, %d results", rep.Backend, len(rep.Results))
	}
	res, fair := rep.Results[0], rep.Results[1]
	if res.Status != StatusPass || len(res.Kills) == 0 {
		t.Fatalf("crash: %s %v, %d kills", res.Status, res.Reasons, len(res.Kills))
	}
	if res.MaxConcurrent != 1 || res.Violations != 0 || res.StaleAccepted != 0 {
		t.Errorf("crash: %d holders at once, %d violations, %d stale writes accepted", res.MaxConcurrent, res.Violations, res.StaleAccepted)
	}
	if fair.Status != StatusSkip || !strings.Contains(strings.Join(fair.Reasons, " "), "driver.Lines") {
		t.Errorf("fair on redlock: %s %v, want a skip naming driver.Lines", fair.Status, fair.Reasons)
	}
}

// A program without the etcd backend (the fencelock command), run outside
// a checkout, says what to run instead; exit status 2 (could not run).
func TestMainEtcdOutsideCheckout(t *testing.T) {
	t.Chdir(t.TempDir())
	var stdout, stderr bytes.Buffer
	code := Main([]string{"--backend", "etcd", "--scenario", "mutex"}, &stdout, &stderr, MainOptions{WorkerCommand: []string{os.Args[0]}})
	if code != 2 || !strings.Contains(stderr.String(), "go run ./cmd/etcddemo --backend etcd --scenario mutex") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

// Bad values name themselves.
func TestMainBackendFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--backend", "zookeeper"}, `invalid --backend "zookeeper"`},
		{[]string{"--backend", "redlock", "--masters", "4"}, "invalid --masters 4"},
		{[]string{"--masters", "3"}, "--masters applies only to --backend redlock"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(tc.args, &stdout, &stderr, MainOptions{WorkerCommand: []string{os.Args[0]}}); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
