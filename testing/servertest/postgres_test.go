package servertest

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fencelock/testing/pgserver"
)

// These tests share the package's one PostgreSQL server and are not
// parallel at the top level: TestClosePostgres, the last, stops it.

func pgConnect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func pgQueryString(t *testing.T, conn *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// databaseOf returns the database a URL names.
func databaseOf(t *testing.T, u string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Database
}

func TestPostgresFreshIsolatedDatabases(t *testing.T) {
	t0 := time.Now()
	url1 := Postgres(t)
	t1 := time.Now()
	url2 := Postgres(t)
	t.Logf("first Postgres took %v, second %v", t1.Sub(t0), time.Since(t1))

	if databaseOf(t, url1) == databaseOf(t, url2) {
		t.Fatalf("two calls gave the same database: %s, %s", url1, url2)
	}
	ctx := context.Background()
	c1, c2 := pgConnect(t, url1), pgConnect(t, url2)
	for _, c := range []*pgx.Conn{c1, c2} {
		if n := pgQueryString(t, c, "SELECT count(*)::text FROM pg_tables WHERE schemaname = 'public'"); n != "0" {
			t.Errorf("fresh database has %s tables", n)
		}
		if super := pgQueryString(t, c, "SELECT current_setting('is_superuser')"); super != "on" {
			t.Errorf("is_superuser = %s", super)
		}
	}
	if got := pgQueryString(t, c1, "SELECT current_database()"); got != databaseOf(t, url1) {
		t.Errorf("connected to %s, want %s", got, databaseOf(t, url1))
	}

	if _, err := c1.Exec(ctx, "CREATE TABLE fences (name text PRIMARY KEY, token bigint)"); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Exec(ctx, "INSERT INTO fences VALUES ('a', 42)"); err != nil {
		t.Fatal(err)
	}
	if got := pgQueryString(t, c1, "SELECT token::text FROM fences WHERE name = 'a'"); got != "42" {
		t.Errorf("token = %s, want 42", got)
	}
	if got := pgQueryString(t, c2, "SELECT coalesce(to_regclass('fences')::text, 'none')"); got != "none" {
		t.Errorf("the second database sees the first one's table: %s", got)
	}
	if _, err := c2.Exec(ctx, "CREATE TABLE fences (other int)"); err != nil {
		t.Errorf("same table name in the second database: %v", err)
	}
}

func TestPostgresParallel(t *testing.T) {
	Postgres(t) // start the server first, to time the others
	const n = 8
	t0 := time.Now()
	t.Run("group", func(t *testing.T) {
		for i := range n {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				c := pgConnect(t, Postgres(t))
				ctx := context.Background()
				if _, err := c.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
					t.Fatal(err)
				}
				if _, err := c.Exec(ctx, "INSERT INTO t VALUES ($1)", i); err != nil {
					t.Fatal(err)
				}
				if got := pgQueryString(t, c, "SELECT string_agg(x::text, ',') FROM t"); got != strconv.Itoa(i) {
					t.Errorf("t holds %s, want only %d", got, i)
				}
			})
		}
	})
	t.Logf("%d parallel tests with a database each (created and dropped) took %v", n, time.Since(t0))
}

func TestPostgresDropsDatabaseAtCleanup(t *testing.T) {
	var name string
	var leaked *pgx.Conn
	t.Run("inner", func(t *testing.T) {
		u := Postgres(t)
		name = databaseOf(t, u)
		// A connection left open does not stop the drop.
		c, err := pgx.Connect(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		leaked = c
	})
	if name == "" {
		t.Skip("inner test skipped")
	}
	defer leaked.Close(context.Background())
	c := pgConnect(t, Postgres(t))
	if got := pgQueryString(t, c, "SELECT count(*)::text FROM pg_database WHERE datname = $1", name); got != "0" {
		t.Errorf("database %s survives the test's cleanup", name)
	}
	if err := leaked.Ping(context.Background()); err == nil {
		t.Error("the connection to the dropped database still works")
	}
}

func TestPostgresExternalURL(t *testing.T) {
	// Any server will do as the "external" one: use the shared server.
	Postgres(t)
	srv := sharedPG.srv
	if srv == nil {
		t.Fatal("no shared server")
	}
	port := strconv.Itoa(srv.Port())
	for _, external := range []string{
		srv.URL(),
		"host=127.0.0.1 port=" + port + " user=" + pgserver.User + " dbname=" + pgserver.Database + " sslmode=disable",
	} {
		t.Run("", func(t *testing.T) {
			t.Setenv(EnvPostgresURL, external)
			before := sharedPG.srv
			u := Postgres(t)
			if sharedPG.srv != before {
				t.Error("Postgres touched the shared server despite $" + EnvPostgresURL)
			}
			c := pgConnect(t, u)
			if got := pgQueryString(t, c, "SELECT current_database()"); got == pgserver.Database || !strings.HasPrefix(got, "test_") {
				t.Errorf("connected to database %s, want a fresh test_ one", got)
			}
			if got := pgQueryString(t, c, "SELECT inet_server_port()::text"); got != port {
				t.Errorf("connected to port %s, want %s", got, port)
			}
		})
	}
}

func TestWithDatabase(t *testing.T) {
	for _, conn := range []string{
		"postgres://u@127.0.0.1:5432/db?sslmode=disable",
		"postgresql://u:p%40ss@[::1]:5432/?sslmode=disable&dbname=other",
		"postgres://u@h",
		"host=h port=5432 user=u dbname=db sslmode=disable",
		"host=h user=u ",
	} {
		got, err := withDatabase(conn, "test_1_ab")
		if err != nil {
			t.Errorf("withDatabase(%q): %v", conn, err)
			continue
		}
		cfg, err := pgx.ParseConfig(got)
		if err != nil {
			t.Errorf("withDatabase(%q) = %q: %v", conn, got, err)
			continue
		}
		if cfg.Database != "test_1_ab" || cfg.User != "u" {
			t.Errorf("withDatabase(%q) = %q: database %q, user %q", conn, got, cfg.Database, cfg.User)
		}
	}
	if _, err := withDatabase("postgres://%zz", "x"); err == nil {
		t.Error("bad URL accepted")
	}
}

// pgRecordingTB records Skipf and Fatalf instead of acting on them (both
// end the calling goroutine, like the real ones).
type pgRecordingTB struct {
	testing.TB
	skipped, fatal string
}

func (r *pgRecordingTB) Helper() {}

func (r *pgRecordingTB) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *pgRecordingTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func runPostgres(t *testing.T) *pgRecordingTB {
	r := &pgRecordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Postgres(r)
		t.Error("Postgres returned despite missing binaries")
	}()
	<-done
	return r
}

func TestPostgresMissingBinaries(t *testing.T) {
	if err := ClosePostgres(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ClosePostgres() }) // forget the cached failure
	t.Setenv(EnvPostgresURL, "")
	t.Setenv(pgserver.EnvBin, t.TempDir())

	t.Setenv(EnvRequireServers, "")
	r := runPostgres(t)
	if r.fatal != "" || !strings.Contains(r.skipped, "initdb") || !strings.Contains(r.skipped, pgserver.InstallHint) {
		t.Errorf("without %s: skipped %q, fatal %q; want a skip naming initdb and %q",
			EnvRequireServers, r.skipped, r.fatal, pgserver.InstallHint)
	}
	t.Setenv(EnvRequireServers, "1")
	r = runPostgres(t)
	if r.skipped != "" || !strings.Contains(r.fatal, "initdb") || !strings.Contains(r.fatal, pgserver.InstallHint) {
		t.Errorf("with %s=1: skipped %q, fatal %q; want a failure naming initdb and %q",
			EnvRequireServers, r.skipped, r.fatal, pgserver.InstallHint)
	}
}

// TestClosePostgres runs last among the tests that use the shared server.
func TestClosePostgres(t *testing.T) {
	t.Run("use", func(t *testing.T) { Postgres(t) })
	srv := sharedPG.srv
	if srv == nil {
		t.Skip("no shared server (skipped)")
	}
	pid, dir := srv.Pid(), srv.Dir()
	if err := ClosePostgres(); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(-pid, 0) == nil {
		t.Errorf("postgres process group %d survives ClosePostgres", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("dir %s survives ClosePostgres: %v", dir, err)
	}
	if err := ClosePostgres(); err != nil {
		t.Errorf("second ClosePostgres: %v", err)
	}

	// A later Postgres starts a new server.
	t.Run("again", func(t *testing.T) { pgConnect(t, Postgres(t)) })
	if sharedPG.srv == nil || sharedPG.srv == srv {
		t.Fatal("no new shared server")
	}
	if err := ClosePostgres(); err != nil {
		t.Fatal(err)
	}
}
