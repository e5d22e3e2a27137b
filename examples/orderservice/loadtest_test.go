package main

import (
	"context"
	"database/sql"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/testing/servertest"
)

// smallLoadtest is the load test at reduced size, on a private
// redis-server. Its instances are this test binary (see TestMain).
func smallLoadtest(t *testing.T) LoadtestConfig {
	t.Helper()
	if testing.Short() {
		t.Skip("starts service processes")
	}
	srv := servertest.Redis(t)
	return LoadtestConfig{
		Instances:   2,
		Requests:    300,
		Stock:       50,
		Concurrency: 100,
		RequestNos:  20,
		Duplicates:  5,
		DB:          "sqlite",
		WorkDelay:   2 * time.Millisecond,
		// Generous: the instances run with the race detector on 2 cores,
		// and checkPass wants every request served (no 503 busy).
		LockWait: 20 * time.Second,
		Timeout:  3 * time.Minute,
		RedisURL: "redis://" + srv.Addr() + "/0",
	}
}

// runLoadtest runs cfg and logs the report.
func runLoadtest(t *testing.T, cfg LoadtestConfig) *Report {
	t.Helper()
	rep, err := RunLoadtest(context.Background(), cfg, tlogWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Print(&b)
	t.Logf("report:\n%s", b.String())
	return rep
}

// tlogWriter writes progress lines to the test log.
type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestLoadtestSQLite(t *testing.T) {
	cfg := smallLoadtest(t)
	rep := runLoadtest(t, cfg)
	checkPass(t, cfg, rep)
	if rep.Database != "sqlite" {
		t.Errorf("database %q, want sqlite", rep.Database)
	}
}

func TestLoadtestPostgres(t *testing.T) {
	cfg := smallLoadtest(t)
	cfg.DB = "postgres"
	cfg.DatabaseURL = servertest.Postgres(t)
	rep := runLoadtest(t, cfg)
	checkPass(t, cfg, rep)
	if rep.Database != "postgres" {
		t.Errorf("database %q, want postgres", rep.Database)
	}
}

func checkPass(t *testing.T, cfg LoadtestConfig, rep *Report) {
	t.Helper()
	d, o := rep.Deduct, rep.Orders
	if !rep.Pass {
		t.Errorf("FAIL: %v %v %v", d.Failures, o.Failures, rep.Failures)
	}
	if d.Successes != cfg.Stock || d.FinalStock != 0 || d.OrderRows != int64(cfg.Stock) || d.Successes+d.Insufficient+d.Busy != cfg.Requests {
		t.Errorf("phase 1: %+v", d)
	}
	if o.OrderRows != cfg.RequestNos || o.ExactlyOne != cfg.RequestNos || o.Created != cfg.RequestNos ||
		o.Created+o.Replayed+o.InProgress != cfg.RequestNos*cfg.Duplicates || o.MismatchedBody != 0 {
		t.Errorf("phase 2: %+v", o)
	}
	if rep.Locks.Acquired < int64(cfg.Requests) {
		t.Errorf("the instances counted %d lock acquisitions, want at least %d", rep.Locks.Acquired, cfg.Requests)
	}
	if !rep.CleanShutdown {
		t.Error("the instances did not shut down cleanly")
	}
}

// Without the lock (and the guards), the same load oversells and creates
// duplicate orders: the run must not pass.
func TestLoadtestNoLockFails(t *testing.T) {
	cfg := smallLoadtest(t)
	cfg.NoLock = true
	cfg.WorkDelay = 20 * time.Millisecond // a wide read-to-write window, so the failure shows every time
	rep := runLoadtest(t, cfg)
	if rep.Pass {
		t.Fatal("--no-lock passed: the demonstration shows nothing")
	}
	if rep.Deduct.Pass || rep.Deduct.Successes <= cfg.Stock || rep.Deduct.FinalStock >= 0 {
		t.Errorf("phase 1 without the lock: %+v, want oversell (more successes than stock, negative stock)", rep.Deduct)
	}
	if rep.Orders.Pass || rep.Orders.DuplicateOrders == 0 {
		t.Errorf("phase 2 without the lock: %+v, want duplicate orders", rep.Orders)
	}
	if !rep.CleanShutdown {
		t.Error("the instances did not shut down cleanly")
	}
}

// The load test creates the SQLite file, in WAL mode and migrated, before
// it starts the instances: they do not race to create it.
func TestLoadtestPreparesSQLite(t *testing.T) {
	ctx := context.Background()
	rep := &Report{}
	url, path, closeDB, err := loadtestDatabase(ctx, LoadtestConfig{DB: "sqlite"}, t.TempDir(), rep, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB()
	if url != "" || path == "" || rep.Database != "sqlite" {
		t.Fatalf("database %q, url %q, path %q: want a SQLite file", rep.Database, url, path)
	}
	// A plain connection, without the service's pragmas: what the file is.
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal mode %q (%v), want wal", mode, err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(migrations) {
		t.Errorf("%d migrations recorded (%v), want %d", n, err, len(migrations))
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+idempotencyTable).Scan(&n); err != nil {
		t.Errorf("idempotency table: %v", err)
	}
}
