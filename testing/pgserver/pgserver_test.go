package pgserver_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/fencelock/fencelock/testing/childproc"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fencelock/testing/pgserver"
	"github.com/fencelock/fencelock/testing/servertest"
)

// start is pgserver.Start with the skip/fail policy of servertest.Redis and
// Close registered with t.Cleanup.
func start(t *testing.T, opts pgserver.Options) *pgserver.Server {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	srv, err := pgserver.Start(opts)
	if errors.Is(err, pgserver.ErrNotFound) {
		if servertest.RequireServers() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("postgres log:\n%s", childproc.Tail(srv.Log(), 40))
		}
		srv.Close()
	})
	return srv
}

func connect(t *testing.T, url string) *pgx.Conn {
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

// alive reports whether a process (or, for a negative pid, a process group)
// exists.
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// childrenOf returns the pids of the children of process pid, as listed
// in /proc (none where there is no /proc).
func childrenOf(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var children []int
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		fields := strings.Fields(string(b[i+1:]))
		if i < 0 || len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		if child, err := strconv.Atoi(filepath.Base(filepath.Dir(path))); err == nil {
			children = append(children, child)
		}
	}
	return children
}

func TestStartQueryClose(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	srv := start(t, pgserver.Options{})
	t.Logf("Start took %v", time.Since(t0))

	want := "postgres://fencelock@" + srv.Addr() + "/fencelock?sslmode=disable"
	if srv.URL() != want {
		t.Errorf("URL() = %q, want %q", srv.URL(), want)
	}
	if want := "127.0.0.1:" + strconv.Itoa(srv.Port()); srv.Addr() != want || srv.Port() == 0 {
		t.Errorf("Addr() = %q, Port() = %d", srv.Addr(), srv.Port())
	}

	ctx := context.Background()
	conn := connect(t, srv.URL())
	if _, err := conn.Exec(ctx, "CREATE TABLE locks (name text PRIMARY KEY, token bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO locks VALUES ($1, $2), ($3, $4)", "a", 1, "b", 2); err != nil {
		t.Fatal(err)
	}
	var token int64
	if err := conn.QueryRow(ctx, "SELECT token FROM locks WHERE name = $1", "b").Scan(&token); err != nil || token != 2 {
		t.Fatalf("SELECT token = %d, %v; want 2", token, err)
	}
	var db, user, fsync, encoding string
	var maxConns int
	err := conn.QueryRow(ctx, `SELECT current_database(), current_user, current_setting('fsync'),
		current_setting('server_encoding'), current_setting('max_connections')::int`).Scan(&db, &user, &fsync, &encoding, &maxConns)
	if err != nil {
		t.Fatal(err)
	}
	if db != pgserver.Database || user != pgserver.User || fsync != "off" || encoding != "UTF8" || maxConns != 200 {
		t.Errorf("database %s, user %s, fsync %s, encoding %s, max_connections %d; want fencelock, fencelock, off, UTF8, 200",
			db, user, fsync, encoding, maxConns)
	}

	// Only loopback TCP, plus a socket in the private directory.
	var listen, sockets string
	if err := conn.QueryRow(ctx, "SELECT current_setting('listen_addresses'), current_setting('unix_socket_directories')").Scan(&listen, &sockets); err != nil {
		t.Fatal(err)
	}
	if listen != "127.0.0.1" || !strings.Contains(sockets, srv.Dir()) {
		t.Errorf("listen_addresses %q, unix_socket_directories %q", listen, sockets)
	}
	if _, err := os.Stat(filepath.Join(srv.Dir(), ".s.PGSQL."+strconv.Itoa(srv.Port()))); err != nil {
		t.Errorf("no Unix-domain socket in the private dir: %v", err)
	}

	pid := srv.Pid()
	if pid == 0 || !alive(pid) {
		t.Fatalf("Pid() = %d, not a live process", pid)
	}
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		t.Errorf("postmaster pgid = %d, %v; want its own group %d", pgid, err, pid)
	}
	// As root, postgres runs as the postgres user (it refuses root).
	fi, err := os.Stat("/proc/" + strconv.Itoa(pid))
	if err == nil {
		uid := fi.Sys().(*syscall.Stat_t).Uid
		if os.Geteuid() == 0 && uid == 0 || os.Geteuid() != 0 && int(uid) != os.Geteuid() {
			t.Errorf("postgres runs as uid %d (we are %d)", uid, os.Geteuid())
		}
	}
	if log := srv.Log(); !strings.Contains(log, "ready to accept connections") {
		t.Errorf("Log() lacks the ready message:\n%s", log)
	}

	children := childrenOf(pid)
	if _, err := os.Stat("/proc"); err == nil && len(children) == 0 {
		t.Errorf("postmaster %d has no children", pid)
	}
	t0 = time.Now()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %v", time.Since(t0))
	if alive(-pid) {
		t.Errorf("process group %d survives Close", pid)
	}
	for _, c := range children {
		if alive(c) {
			t.Errorf("postmaster child %d survives Close", c)
		}
	}
	if srv.Pid() != 0 {
		t.Errorf("Pid() = %d after Close", srv.Pid())
	}
	if _, err := os.Stat(srv.Dir()); !os.IsNotExist(err) {
		t.Errorf("dir survives Close: %v", err)
	}
	if srv.Log() != "" {
		t.Error("Log() not empty after Close")
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", srv.Addr(), time.Second); err == nil {
		t.Errorf("%s still accepts connections after Close", srv.Addr())
	}
}

// A connection still open, even inside a transaction, does not delay Close
// (a fast shutdown).
func TestCloseWithOpenTransaction(t *testing.T) {
	t.Parallel()
	srv := start(t, pgserver.Options{})
	ctx := context.Background()
	conn := connect(t, srv.URL())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Error("connection still works after Close")
	}
}

func TestStartFixedPortAndPortInUse(t *testing.T) {
	// Servers' directories go to a private TMPDIR, so that this test can
	// see what a failed Start leaves behind. Its parents must be
	// searchable by the postgres user when we run as root.
	tmp := t.TempDir()
	for _, d := range []string{tmp, filepath.Dir(tmp)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TMPDIR", tmp)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := start(t, pgserver.Options{Port: port})
	if srv.Port() != port {
		t.Fatalf("Port() = %d, want %d", srv.Port(), port)
	}
	if filepath.Dir(srv.Dir()) != tmp {
		t.Fatalf("Dir() = %s, not in $TMPDIR %s", srv.Dir(), tmp)
	}
	connect(t, srv.URL())

	// A second server on the same port fails (after retrying) and leaves
	// nothing behind.
	var logged []string
	second, err := pgserver.Start(pgserver.Options{Port: port, Logf: func(format string, args ...any) {
		logged = append(logged, fmt.Sprintf(format, args...))
	}})
	if err == nil {
		second.Close()
		t.Fatal("second Start on a taken port succeeded")
	}
	if !strings.Contains(err.Error(), "already in use") {
		t.Errorf("error does not say the port is in use: %v", err)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "Address already in use") {
		t.Errorf("Logf got %q, want one message with the log", logged)
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || filepath.Join(tmp, entries[0].Name()) != srv.Dir() {
		t.Errorf("$TMPDIR holds %v, want only the first server's dir", entries)
	}
}

func TestStartInvalidPort(t *testing.T) {
	for _, port := range []int{-1, 65536} {
		if srv, err := pgserver.Start(pgserver.Options{Port: port}); err == nil {
			srv.Close()
			t.Errorf("Start with port %d succeeded", port)
		}
	}
}

func TestFindHonoursEnv(t *testing.T) {
	empty := t.TempDir()
	t.Setenv(pgserver.EnvBin, empty)
	_, err := pgserver.Find()
	if !errors.Is(err, pgserver.ErrNotFound) || !strings.Contains(err.Error(), pgserver.InstallHint) || !strings.Contains(err.Error(), empty) {
		t.Errorf("Find with $%s=%s: %v; want ErrNotFound naming the dir and %q", pgserver.EnvBin, empty, err, pgserver.InstallHint)
	}
	if _, err := pgserver.Start(pgserver.Options{}); !errors.Is(err, pgserver.ErrNotFound) {
		t.Errorf("Start error %v does not wrap ErrNotFound", err)
	}

	t.Setenv(pgserver.EnvBin, "")
	dir, err := pgserver.Find()
	if errors.Is(err, pgserver.ErrNotFound) && !servertest.RequireServers() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("Find() = %s, which lacks %s: %v", dir, name, err)
		}
	}
	t.Setenv(pgserver.EnvBin, dir)
	if got, err := pgserver.Find(); got != dir || err != nil {
		t.Errorf("Find with $%s=%s = %s, %v", pgserver.EnvBin, dir, got, err)
	}
}

func TestFindNotOnPath(t *testing.T) {
	t.Setenv(pgserver.EnvBin, "")
	t.Setenv("PATH", t.TempDir())
	dir, err := pgserver.Find()
	if err != nil {
		if !errors.Is(err, pgserver.ErrNotFound) || !strings.Contains(err.Error(), pgserver.InstallHint) {
			t.Errorf("Find: %v; want ErrNotFound saying %q", err, pgserver.InstallHint)
		}
		return
	}
	if !strings.HasPrefix(dir, "/usr/lib/postgresql/") && !strings.HasPrefix(dir, "/usr/pgsql-") {
		t.Errorf("Find() without $PATH = %s, want a versioned install dir", dir)
	}
}
