package idempotency_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/idempotency"
	"github.com/fencelock/fencelock/testing/servertest"
)

func dialectOf(name string) idempotency.Dialect {
	if name == "postgres" {
		return idempotency.Postgres
	}
	return idempotency.SQLite
}

// Keys that PostgreSQL cannot store (a NUL byte, invalid UTF-8) or that are
// too long are refused before anything is sent, on both databases alike,
// with an error naming the key and matching ErrInvalidArgument (and
// fencelock.ErrInvalidArgument). Unchecked, a NUL byte would reach
// PostgreSQL, which fails with `invalid byte sequence for encoding "UTF8":
// 0x00` (a 500 in a service), while SQLite would store it.
func TestUnstorableKeysRefused(t *testing.T) {
	for name, setup := range setups(t) {
		t.Run(name, func(t *testing.T) {
			e := setup(t)
			g := idempotency.New(e.locks[0], e.store)
			ctx := context.Background()
			var runs atomic.Int64
			for _, tc := range []struct {
				scope, key, mention string
			}{
				{"create_order", "R-\x00-1", `request key "R-\x00-1": contains a NUL byte`},
				{"create_order", "\x00", "NUL"},
				{"create_order", "R-\xff", "not valid UTF-8"},
				{"create_order", strings.Repeat("k", idempotency.MaxKeyLen+1), "request key of 257 bytes: at most 256"},
				{"create\x00order", "R-1", `scope "create\x00order"`},
				{strings.Repeat("s", 300), "R-1", "scope of 300 bytes"},
				{"create_order", "", `request key "": must not be empty`},
			} {
				_, err := g.Do(ctx, tc.scope, tc.key, insertOrder(dialectOf(name), "R", &runs, 0))
				if !errors.Is(err, idempotency.ErrInvalidArgument) || !errors.Is(err, fencelock.ErrInvalidArgument) ||
					!strings.Contains(err.Error(), tc.mention) {
					t.Errorf("Do(%q, %q): %v, want ErrInvalidArgument mentioning %s", tc.scope, tc.key, err, tc.mention)
				}
				if strings.Count(err.Error(), "idempotency:") != 1 || strings.Contains(err.Error(), "\n") {
					t.Errorf("Do(%q, %q): %q: want one line with one prefix", tc.scope, tc.key, err)
				}
				if _, _, err := e.store.Get(ctx, tc.scope, tc.key); !errors.Is(err, idempotency.ErrInvalidArgument) {
					t.Errorf("Get(%q, %q): %v, want ErrInvalidArgument", tc.scope, tc.key, err)
				}
			}
			if runs.Load() != 0 {
				t.Errorf("the operation ran %d times for refused keys", runs.Load())
			}
			// The longest key allowed, and any valid UTF-8, are stored.
			for _, key := range []string{strings.Repeat("k", idempotency.MaxKeyLen), "注文-✓-1"} {
				if _, err := g.Do(ctx, "create_order", key, insertOrder(dialectOf(name), key, &runs, 0)); err != nil {
					t.Errorf("Do with key %q: %v", key, err)
				}
			}
			if _, err := g.Do(ctx, "s", "k", nil); !errors.Is(err, idempotency.ErrInvalidArgument) {
				t.Errorf("nil operation: %v", err)
			}
			bad := idempotency.New(e.locks[0], e.store, idempotency.WithWait(-time.Second))
			if _, err := bad.Do(ctx, "s", "k", insertOrder(dialectOf(name), "k", &runs, 0)); !errors.Is(err, idempotency.ErrInvalidArgument) ||
				!strings.Contains(err.Error(), "WithWait -1s") {
				t.Errorf("negative wait: %v", err)
			}
			if _, err := idempotency.New(nil, e.store).Do(ctx, "s", "k", insertOrder(dialectOf(name), "k", &runs, 0)); !errors.Is(err, idempotency.ErrInvalidArgument) {
				t.Errorf("nil lock client: %v", err)
			}
			if _, err := idempotency.NewStore(e.db, idempotency.Dialect(9), "t"); !errors.Is(err, idempotency.ErrInvalidArgument) {
				t.Errorf("bad dialect: %v", err)
			}
		})
	}
}

// A duplicate with a different payload gets ErrPayloadMismatch, not the
// first response, whether the first request is done, failed or in
// progress; the same payload is replayed; a Do without a fingerprint is
// not checked.
func TestFingerprintMismatch(t *testing.T) {
	for name, setup := range setups(t) {
		t.Run(name, func(t *testing.T) {
			e := setup(t)
			d := dialectOf(name)
			g := idempotency.New(e.locks[0], e.store)
			ctx := context.Background()
			var runs atomic.Int64
			a, b := idempotency.WithFingerprint([]byte(`{"item":"book","count":1}`)), idempotency.WithFingerprint([]byte(`{"item":"book","count":2}`))

			first, err := g.Do(ctx, "create_order", "F-1", insertOrder(d, "F-1", &runs, 0), a)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.Do(ctx, "create_order", "F-1", insertOrder(d, "F-1", &runs, 0), b); !errors.Is(err, idempotency.ErrPayloadMismatch) {
				t.Fatalf("done, other payload: %v, want ErrPayloadMismatch", err)
			}
			if res, err := g.Do(ctx, "create_order", "F-1", insertOrder(d, "F-1", &runs, 0), a); err != nil || !res.Replayed ||
				string(res.Response) != string(first.Response) {
				t.Fatalf("done, same payload: %+v %v, want the replay", res, err)
			}
			if res, err := g.Do(ctx, "create_order", "F-1", insertOrder(d, "F-1", &runs, 0)); err != nil || !res.Replayed {
				t.Fatalf("done, no fingerprint: %+v %v, want the replay", res, err)
			}
			// Lookup answers the same without running anything.
			if res, found, err := g.Lookup(ctx, "create_order", "F-1", a); err != nil || !found || string(res.Response) != string(first.Response) {
				t.Errorf("Lookup, same payload: %+v %v %v", res, found, err)
			}
			if _, _, err := g.Lookup(ctx, "create_order", "F-1", b); !errors.Is(err, idempotency.ErrPayloadMismatch) {
				t.Errorf("Lookup, other payload: %v", err)
			}
			if _, found, err := g.Lookup(ctx, "create_order", "NEVER", a); err != nil || found {
				t.Errorf("Lookup of an unknown key: found %v, %v", found, err)
			}
			if _, _, err := g.Lookup(ctx, "create_order", "F-\x00"); !errors.Is(err, idempotency.ErrInvalidArgument) {
				t.Errorf("Lookup of a NUL key: %v", err)
			}
			rec, _, _ := e.store.Get(ctx, "create_order", "F-1")
			if len(rec.Fingerprint) != 64 {
				t.Errorf("record fingerprint %q, want a hex SHA-256", rec.Fingerprint)
			}

			// A failed request is run again only for its own payload.
			boom := errors.New("declined")
			fail := func(context.Context, *sql.Tx) ([]byte, error) { return nil, boom }
			if _, err := g.Do(ctx, "pay", "F-2", fail, a); !errors.Is(err, boom) {
				t.Fatalf("failing run: %v", err)
			}
			if _, err := g.Do(ctx, "pay", "F-2", insertOrder(d, "F-2", &runs, 0), b); !errors.Is(err, idempotency.ErrPayloadMismatch) {
				t.Fatalf("failed, other payload: %v, want ErrPayloadMismatch", err)
			}
			if res, err := g.Do(ctx, "pay", "F-2", insertOrder(d, "F-2", &runs, 0), a); err != nil || res.Replayed {
				t.Fatalf("failed, same payload: %+v %v, want a new run", res, err)
			}

			// In progress: the other payload is refused at once, not told
			// to retry (a retry could only end in the mismatch).
			started, proceed := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				_, err := g.Do(ctx, "create_order", "F-3", func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
					close(started)
					<-proceed
					return []byte("ok"), nil
				}, a)
				done <- err
			}()
			<-started
			_, err = g.Do(ctx, "create_order", "F-3", insertOrder(d, "F-3", &runs, 0), b)
			_, _, lookErr := g.Lookup(ctx, "create_order", "F-3", a)
			close(proceed)
			if !errors.Is(lookErr, idempotency.ErrInProgress) {
				t.Errorf("Lookup in progress: %v, want ErrInProgress", lookErr)
			}
			if !errors.Is(err, idempotency.ErrPayloadMismatch) {
				t.Errorf("in progress, other payload: %v, want ErrPayloadMismatch", err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if runs.Load() != 2 {
				t.Errorf("%d runs, want 2 (F-1 once, F-2's retry once)", runs.Load())
			}
		})
	}
}

// Purge deletes the records older than its age, and only those; a purged
// request runs again. Bad ages are refused.
func TestPurge(t *testing.T) {
	for name, setup := range setups(t) {
		t.Run(name, func(t *testing.T) {
			e := setup(t)
			d := dialectOf(name)
			g := idempotency.New(e.locks[0], e.store)
			ctx := context.Background()
			var runs atomic.Int64
			for _, key := range []string{"OLD-1", "OLD-2", "NEW-1"} {
				if _, err := g.Do(ctx, "create_order", key, insertOrder(d, key, &runs, 0)); err != nil {
					t.Fatal(err)
				}
			}
			// Age two records by a day, as if written then.
			q := `UPDATE idempotency_records SET updated_ms = updated_ms - 86400000 WHERE request_key LIKE 'OLD-%'`
			if _, err := e.db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
			n, err := e.store.Purge(ctx, time.Hour)
			if err != nil || n != 2 {
				t.Fatalf("Purge: %d, %v; want 2 records deleted", n, err)
			}
			for key, want := range map[string]bool{"OLD-1": false, "OLD-2": false, "NEW-1": true} {
				if _, found, err := e.store.Get(ctx, "create_order", key); err != nil || found != want {
					t.Errorf("%s after Purge: found %v (%v), want %v", key, found, err, want)
				}
			}
			if res, err := g.Do(ctx, "create_order", "OLD-1", insertOrder(d, "OLD-1", &runs, 0)); err != nil || res.Replayed {
				t.Errorf("a purged request: %+v %v, want it run again", res, err)
			}
			for _, age := range []time.Duration{0, -time.Hour} {
				if _, err := e.store.Purge(ctx, age); !errors.Is(err, idempotency.ErrInvalidArgument) {
					t.Errorf("Purge(%v): %v, want ErrInvalidArgument", age, err)
				}
			}
		})
	}
}

// Migrate adds the fingerprint column (and the index) to a table made
// before they existed, keeps its records, and can run again, also from
// several goroutines at once.
func TestMigrateOldTable(t *testing.T) {
	open := map[string]func(t *testing.T) *sql.DB{
		"sqlite": func(t *testing.T) *sql.DB {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "old.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
			if err != nil {
				t.Fatal(err)
			}
			return db
		},
		"postgres": func(t *testing.T) *sql.DB {
			db, err := sql.Open("pgx", servertest.Postgres(t))
			if err != nil {
				t.Fatal(err)
			}
			return db
		},
	}
	for name, openDB := range open {
		t.Run(name, func(t *testing.T) {
			db := openDB(t)
			defer db.Close()
			ctx := context.Background()
			blob := "BYTEA"
			if name == "sqlite" {
				blob = "BLOB"
			}
			if _, err := db.ExecContext(ctx, `CREATE TABLE old_records (
    scope TEXT NOT NULL, request_key TEXT NOT NULL, state TEXT NOT NULL, fence BIGINT NOT NULL,
    response `+blob+`, error TEXT, updated_ms BIGINT NOT NULL, PRIMARY KEY (scope, request_key))`); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO old_records VALUES ('s', 'k', 'done', 3, 'body', NULL, 1)`); err != nil {
				t.Fatal(err)
			}
			store, err := idempotency.NewStore(db, dialectOf(name), "old_records")
			if err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, 4)
			for range 4 {
				go func() { errs <- store.Migrate(ctx) }()
			}
			for range 4 {
				if err := <-errs; err != nil {
					t.Fatalf("concurrent Migrate: %v", err)
				}
			}
			rec, found, err := store.Get(ctx, "s", "k")
			if err != nil || !found || string(rec.Response) != "body" || rec.Fingerprint != "" {
				t.Fatalf("old record after Migrate: %+v %v %v", rec, found, err)
			}
		})
	}
}
