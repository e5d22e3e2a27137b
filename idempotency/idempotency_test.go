package idempotency_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/idempotency"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/fencelock/fencelock/testing/servertest"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"
)

type env struct {
	redis *redisserver.Server // the lock service
	rdb   *redis.Client
	db    *sql.DB
	store *idempotency.Store
	locks []*fencelock.Client // several, as if several instances
}

// setups returns a fresh environment per SQL dialect: a real redis-server,
// and SQLite in WAL mode or a fresh PostgreSQL database, with an orders
// table for the operations to write to.
func setups(t *testing.T) map[string]func(t *testing.T) *env {
	return map[string]func(t *testing.T) *env{
		"sqlite": func(t *testing.T) *env {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "idem.db")+
				"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
			if err != nil {
				t.Fatal(err)
			}
			return newEnv(t, db, idempotency.SQLite)
		},
		"postgres": func(t *testing.T) *env {
			db, err := sql.Open("pgx", servertest.Postgres(t))
			if err != nil {
				t.Fatal(err)
			}
			return newEnv(t, db, idempotency.Postgres)
		},
	}
}

func newEnv(t *testing.T, db *sql.DB, d idempotency.Dialect) *env {
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	store, err := idempotency.NewStore(db, d, "idempotency_records")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (request_no TEXT NOT NULL, fence BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	srv := servertest.Redis(t)
	e := &env{redis: srv, db: db, store: store, rdb: redis.NewClient(&redis.Options{Addr: srv.Addr()})}
	t.Cleanup(func() { e.rdb.Close() })
	for range 3 {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		c := fencelock.New(redisbackend.New(rdb))
		t.Cleanup(func() { c.Close(); rdb.Close() })
		e.locks = append(e.locks, c)
	}
	return e
}

func (e *env) orders(t *testing.T) int {
	var n int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// insertOrder is an operation that writes an order row in the transaction.
func insertOrder(d idempotency.Dialect, requestNo string, runs *atomic.Int64, hold time.Duration) idempotency.Operation {
	return func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		n := runs.Add(1)
		q := `INSERT INTO orders (request_no, fence) VALUES ($1, $2)`
		if d == idempotency.SQLite {
			q = `INSERT INTO orders (request_no, fence) VALUES (?, ?)`
		}
		if _, err := tx.ExecContext(ctx, q, requestNo, n); err != nil {
			return nil, err
		}
		select {
		case <-time.After(hold):
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		return fmt.Appendf(nil, `{"order":%q,"run":%d}`, requestNo, n), nil
	}
}

func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	for name, setup := range setups(t) {
		t.Run(name, func(t *testing.T) {
			e := setup(t)
			d := idempotency.SQLite
			if name == "postgres" {
				d = idempotency.Postgres
			}
			ctx := context.Background()
			var runs atomic.Int64
			var mu sync.Mutex
			var bodies [][]byte
			inProgress, replayed := 0, 0
			var wg sync.WaitGroup
			for i := range 50 {
				g := idempotency.New(e.locks[i%len(e.locks)], e.store)
				wg.Go(func() {
					res, err := g.Do(ctx, "create_order", "REQ-1", insertOrder(d, "REQ-1", &runs, 100*time.Millisecond))
					mu.Lock()
					defer mu.Unlock()
					switch {
					case errors.Is(err, idempotency.ErrInProgress):
						inProgress++
					case err != nil:
						t.Error(err)
					default:
						if res.Replayed {
							replayed++
						}
						bodies = append(bodies, res.Response)
					}
				})
			}
			wg.Wait()
			if runs.Load() != 1 {
				t.Fatalf("the operation ran %d times, want 1", runs.Load())
			}
			if n := e.orders(t); n != 1 {
				t.Fatalf("%d order rows, want 1", n)
			}
			if inProgress+len(bodies) != 50 {
				t.Fatalf("in progress %d + results %d != 50", inProgress, len(bodies))
			}
			// Later duplicates replay the identical body.
			g := idempotency.New(e.locks[0], e.store)
			res, err := g.Do(ctx, "create_order", "REQ-1", insertOrder(d, "REQ-1", &runs, 0))
			if err != nil || !res.Replayed {
				t.Fatalf("later duplicate: %+v %v", res, err)
			}
			for _, b := range append(bodies, res.Response) {
				if !bytes.Equal(b, []byte(`{"order":"REQ-1","run":1}`)) {
					t.Fatalf("body %s, want the first run's", b)
				}
			}
			if runs.Load() != 1 {
				t.Fatal("a replay ran the operation")
			}
			t.Logf("1 run, %d told in progress, %d replayed", inProgress, replayed+1)
		})
	}
}

// A run cancelled between "in progress" and "done" (a crash) commits
// nothing; the next request with the same number runs it and completes.
func TestCrashedRunIsResolvedByRetry(t *testing.T) {
	for name, setup := range setups(t) {
		t.Run(name, func(t *testing.T) {
			e := setup(t)
			d := idempotency.SQLite
			if name == "postgres" {
				d = idempotency.Postgres
			}
			g := idempotency.New(e.locks[0], e.store)
			var runs atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			_, err := g.Do(ctx, "create_order", "REQ-2", insertOrder(d, "REQ-2", &runs, time.Minute))
			if err == nil {
				t.Fatal("the cancelled run succeeded")
			}
			rec, found, err := e.store.Get(context.Background(), "create_order", "REQ-2")
			if err != nil || !found || rec.State == "done" {
				t.Fatalf("after the crash: %+v found=%v %v", rec, found, err)
			}
			if n := e.orders(t); n != 0 {
				t.Fatalf("the cancelled run committed %d orders", n)
			}
			res, err := idempotency.New(e.locks[1], e.store).Do(context.Background(), "create_order", "REQ-2",
				insertOrder(d, "REQ-2", &runs, 0))
			if err != nil || res.Replayed {
				t.Fatalf("retry: %+v %v", res, err)
			}
			if n := e.orders(t); n != 1 {
				t.Fatalf("%d orders after the retry, want 1", n)
			}
			rec, _, _ = e.store.Get(context.Background(), "create_order", "REQ-2")
			if rec.State != "done" || !bytes.Equal(rec.Response, res.Response) {
				t.Fatalf("record after the retry: %+v", rec)
			}
		})
	}
}

// A failed operation commits nothing, is recorded as failed, and can be
// retried.
func TestFailedOperationCanBeRetried(t *testing.T) {
	e := setups(t)["sqlite"](t)
	g := idempotency.New(e.locks[0], e.store)
	ctx := context.Background()
	boom := errors.New("payment declined")
	_, err := g.Do(ctx, "pay", "P-1", func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		tx.ExecContext(ctx, `INSERT INTO orders (request_no, fence) VALUES ('P-1', 1)`)
		return nil, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want the operation's error", err)
	}
	rec, _, _ := e.store.Get(ctx, "pay", "P-1")
	if rec.State != "failed" || rec.Error != boom.Error() || e.orders(t) != 0 {
		t.Fatalf("after the failure: %+v, %d orders", rec, e.orders(t))
	}
	res, err := g.Do(ctx, "pay", "P-1", func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		return []byte("paid"), nil
	})
	if err != nil || string(res.Response) != "paid" || res.Replayed {
		t.Fatalf("retry: %+v %v", res, err)
	}
}

// A run whose lock was lost and whose record was taken over by a newer run
// cannot commit, even if it carries on.
func TestSupersededRunCannotCommit(t *testing.T) {
	e := setups(t)["sqlite"](t)
	ctx := context.Background()
	slow := idempotency.New(e.locks[0], e.store) // 30s lease, renewed every 10s
	started := make(chan struct{})
	proceed := make(chan struct{})
	var slowErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		_, slowErr = slow.Do(ctx, "create_order", "REQ-3", func(_ context.Context, tx *sql.Tx) ([]byte, error) {
			close(started)
			<-proceed // stalls past its lease, ignoring the loss signal
			_, err := tx.Exec(`INSERT INTO orders (request_no, fence) VALUES ('REQ-3', 1)`)
			return []byte("slow"), err
		})
	})
	<-started
	// The slow run's lock vanishes on the server (as after a failover that
	// lost it) before its next renewal could notice.
	e.rdb.Del(ctx, "lock:{idempotency:12:create_order:REQ-3}:lock")
	fast := idempotency.New(e.locks[1], e.store)
	res, err := fast.Do(ctx, "create_order", "REQ-3", func(_ context.Context, tx *sql.Tx) ([]byte, error) {
		return []byte("fast"), nil
	})
	close(proceed)
	wg.Wait()
	if err != nil || string(res.Response) != "fast" {
		t.Fatalf("the newer run: %+v %v", res, err)
	}
	if !errors.Is(slowErr, idempotency.ErrSuperseded) {
		t.Fatalf("the stalled run: %v, want ErrSuperseded", slowErr)
	}
	if n := e.orders(t); n != 0 {
		t.Fatalf("the stalled run committed %d orders", n)
	}
}

func TestBadInput(t *testing.T) {
	e := setups(t)["sqlite"](t)
	g := idempotency.New(e.locks[0], e.store)
	ctx := context.Background()
	op := func(context.Context, *sql.Tx) ([]byte, error) { return nil, nil }
	for _, tc := range []struct{ scope, key string }{{"", "k"}, {"s", ""}} {
		if _, err := g.Do(ctx, tc.scope, tc.key, op); err == nil {
			t.Errorf("scope %q key %q accepted", tc.scope, tc.key)
		}
	}
	if _, err := g.Do(ctx, "s", "k", nil); err == nil {
		t.Error("nil operation accepted")
	}
	if _, err := idempotency.NewStore(e.db, idempotency.SQLite, "x; drop"); err == nil {
		t.Error("bad table name accepted")
	}
}

// Scopes and keys with ':' in them do not share locks: a request in
// progress for ("a:b", "c") does not block ("a", "b:c").
func TestScopesDoNotCollide(t *testing.T) {
	e := setups(t)["sqlite"](t)
	g := idempotency.New(e.locks[0], e.store)
	ctx := context.Background()
	started, proceed := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		g.Do(ctx, "a:b", "c", func(context.Context, *sql.Tx) ([]byte, error) {
			close(started)
			<-proceed
			return []byte("first"), nil
		})
	})
	<-started
	res, err := g.Do(ctx, "a", "b:c", func(context.Context, *sql.Tx) ([]byte, error) { return []byte("second"), nil })
	close(proceed)
	wg.Wait()
	if err != nil || string(res.Response) != "second" {
		t.Fatalf("(a, b:c) while (a:b, c) runs: %+v %v", res, err)
	}
}
