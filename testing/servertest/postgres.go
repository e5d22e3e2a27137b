package servertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/fencelock/fencelock/testing/childproc"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fencelock/testing/pgserver"
)

// EnvPostgresURL names the environment variable that, when set to a
// non-empty value, is the URL (or keyword/value connection string) of a
// PostgreSQL server on which Postgres creates its databases, instead of
// starting a server of its own. Its user must be allowed to create
// databases; the database it names is only used to connect.
const EnvPostgresURL = "FENCELOCK_POSTGRES_URL"

// pgTimeout bounds creating or dropping one database.
const pgTimeout = 30 * time.Second

// sharedPG is the one PostgreSQL server that Postgres starts per test
// binary, started by the first call that needs it.
var sharedPG struct {
	mu  sync.Mutex
	srv *pgserver.Server
	err error // the failure of the last start, returned until ClosePostgres
}

// pgDatabases numbers the databases Postgres creates.
var pgDatabases atomic.Int64

// Postgres returns the URL of a fresh, empty database for the test, owned
// by a superuser, and drops the database (disconnecting any session still
// in it) at cleanup.
//
// The databases live on one PostgreSQL server shared by the whole test
// binary (see pgserver.Start), started by the first call (about 1.5 s);
// later calls only cost a CREATE DATABASE (typically 0.05 to 0.2 s). Stop
// that server by calling ClosePostgres from TestMain after m.Run; otherwise
// it is killed when the test binary exits, and its files are removed by the
// next pgserver.Start. If $FENCELOCK_POSTGRES_URL is set, the databases are
// created on that server instead. A database isolates tables, sequences,
// advisory locks (which are keyed by database) and LISTEN channels, but not
// cluster-wide objects such as roles.
//
// If the PostgreSQL binaries are missing, the test is skipped, or fails when
// RequireServers reports true; the message says how to install them. Any
// other failure fails the test.
func Postgres(t testing.TB) (url string) {
	t.Helper()
	admin, srv, err := postgresAdmin()
	if errors.Is(err, pgserver.ErrNotFound) {
		if RequireServers() {
			t.Fatalf("servertest: %v (%s=1, so this is a failure)", err, EnvRequireServers)
		}
		t.Skipf("servertest: skipping: %v (set %s=1 to fail instead)", err, EnvRequireServers)
	}
	if err != nil {
		t.Fatalf("servertest: %v", err)
	}
	name, err := newDatabaseName()
	if err != nil {
		t.Fatalf("servertest: %v", err)
	}
	url, err = withDatabase(admin, name)
	if err != nil {
		t.Fatalf("servertest: $%s: %v", EnvPostgresURL, err)
	}
	if err := createDatabase(admin, name, srv != nil); err != nil {
		t.Fatalf("servertest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if t.Failed() && srv != nil {
			t.Logf("servertest: shared postgres %s log, last %d lines:\n%s",
				srv.Addr(), logTailLines, childproc.Tail(srv.Log(), logTailLines))
		}
		if srv != nil && !isSharedPostgres(srv) {
			return // ClosePostgres removed the server with its databases
		}
		if err := dropDatabase(admin, name); err != nil {
			t.Errorf("servertest: dropping database %s: %v", name, err)
		}
	})
	return url
}

// ClosePostgres stops the PostgreSQL server that Postgres started, if any,
// and removes its files. Call it from TestMain after m.Run. A later
// Postgres starts a new server.
func ClosePostgres() error {
	sharedPG.mu.Lock()
	defer sharedPG.mu.Unlock()
	srv := sharedPG.srv
	sharedPG.srv, sharedPG.err = nil, nil
	if srv == nil {
		return nil
	}
	return srv.Close()
}

func isSharedPostgres(srv *pgserver.Server) bool {
	sharedPG.mu.Lock()
	defer sharedPG.mu.Unlock()
	return sharedPG.srv == srv
}

// postgresAdmin returns the URL to connect to for creating databases, and
// the shared server if the databases are to be created on it (nil when
// $FENCELOCK_POSTGRES_URL is set).
func postgresAdmin() (string, *pgserver.Server, error) {
	if u := os.Getenv(EnvPostgresURL); u != "" {
		return u, nil, nil
	}
	sharedPG.mu.Lock()
	defer sharedPG.mu.Unlock()
	if sharedPG.srv == nil && sharedPG.err == nil {
		srv, err := pgserver.Start(pgserver.Options{})
		if err != nil {
			sharedPG.err = fmt.Errorf("starting the shared postgres: %w", err)
		}
		sharedPG.srv = srv
	}
	if sharedPG.err != nil {
		return "", nil, sharedPG.err
	}
	return sharedPG.srv.URL(), sharedPG.srv, nil
}

// newDatabaseName returns test_N_RANDOM: N tells the databases of this
// process apart, and RANDOM those of other processes using the same server.
func newDatabaseName() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "test_" + strconv.FormatInt(pgDatabases.Add(1), 10) + "_" + hex.EncodeToString(b[:]), nil
}

// withDatabase returns the connection string conn with its database
// replaced by name. conn is a postgres:// or postgresql:// URL, or a
// keyword/value string (in which a later keyword wins).
func withDatabase(conn, name string) (string, error) {
	if !strings.HasPrefix(conn, "postgres://") && !strings.HasPrefix(conn, "postgresql://") {
		return strings.TrimSpace(conn) + " dbname=" + name, nil
	}
	u, err := url.Parse(conn)
	if err != nil {
		return "", err
	}
	u.Path, u.RawPath = "/"+name, ""
	q := u.Query()
	if q.Has("dbname") { // libpq lets the query override the path
		q.Set("dbname", name)
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// createDatabase creates database name. fileCopy asks for STRATEGY
// FILE_COPY (on PostgreSQL 15 and later), which is about twice as fast as
// the default for the tiny template of a test server, but checkpoints, so
// it is only used on our own server.
func createDatabase(admin, name string, fileCopy bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if fileCopy {
		var version int
		if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
			return err
		}
		if version >= 150000 {
			sql += " STRATEGY FILE_COPY"
		}
	}
	_, err = conn.Exec(ctx, sql)
	return err
}

// dropDatabase drops database name, terminating its sessions (which needs
// PostgreSQL 13 or later).
func dropDatabase(admin, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}
