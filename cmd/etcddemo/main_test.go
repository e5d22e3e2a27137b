package main

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/fencelock/fencelock/cmd/internal/demo"
	"github.com/fencelock/fencelock/testing/leaktest"
	"github.com/fencelock/fencelock/testing/servertest"
)

// TestMain lets the test binary stand in for etcddemo: the demo starts its
// workers as "<this binary> demo-worker".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "demo-worker" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	leaktest.Main(m)
}

// "fencelock demo --backend etcd --scenario restart" end to end: a real
// 3-member etcd cluster, real worker processes; every member is kill -9ed
// and restarted while a worker holds the lock. etcd keeps it: the holder
// is told of no loss, no two hold it, fences keep rising.
func TestRestartKeepsTheLock(t *testing.T) {
	srv := servertest.Redis(t) // the checks' Redis; skips (or fails) without redis-server
	var stdout, stderr bytes.Buffer
	code := run([]string{"--scenario", "restart,failover", "--workers", "3", "--iterations", "3",
		"--redis", srv.Addr(), "--json"}, &stdout, &stderr)
	t.Logf("stderr:\n%s", stderr.String())
	if code != 0 {
		t.Fatalf("exit %d; stdout:\n%s", code, stdout.String())
	}
	var rep demo.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results", len(rep.Results))
	}
	res, failover := rep.Results[0], rep.Results[1]
	rs := res.Restart
	if res.Status != demo.StatusPass || rs == nil {
		t.Fatalf("restart: %s %v", res.Status, res.Reasons)
	}
	if rs.HolderFence == 0 || !rs.Kept {
		t.Errorf("the lock held across the restart (fence %d) was not kept: %+v", rs.HolderFence, rs)
	}
	if res.MaxConcurrent != 1 || res.Violations != 0 || res.LossSignals != 0 || rs.FenceAfter <= rs.FenceBefore {
		t.Errorf("%d holders at once, %d violations, %d loss signals, fences %d -> %d",
			res.MaxConcurrent, res.Violations, res.LossSignals, rs.FenceBefore, rs.FenceAfter)
	}
	if failover.Status != demo.StatusSkip {
		t.Errorf("failover on etcd: %s, want a skip (Redis only)", failover.Status)
	}
}
