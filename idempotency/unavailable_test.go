package idempotency_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/idempotency"
	"github.com/fencelock/fencelock/testing/faultproxy"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// With Redis down, a request is told "unavailable" (matching both
// idempotency.ErrUnavailable and fencelock.ErrUnavailable), not "in
// progress": nobody runs it, and nothing is written. A finished request is
// still replayed, from the store alone. Do must not answer ErrInProgress
// here (as it would if failed attempts were reported as ErrNotAcquired),
// which an HTTP layer turns into a 409.
func TestLockServiceDownIsUnavailable(t *testing.T) {
	for name, setup := range setups(t) {
		for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
			t.Run(name+"/wait="+wait.String(), func(t *testing.T) {
				e := setup(t)
				d := idempotency.SQLite
				if name == "postgres" {
					d = idempotency.Postgres
				}
				g := idempotency.New(e.locks[0], e.store, idempotency.WithWait(wait))
				ctx := context.Background()
				var runs atomic.Int64
				// A request done while Redis was up: the pool keeps its
				// connection, as in a service that has been running.
				first, err := g.Do(ctx, "create_order", "DONE-1", insertOrder(d, "DONE-1", &runs, 0))
				if err != nil {
					t.Fatal(err)
				}

				if err := e.redis.Stop(); err != nil {
					t.Fatal(err)
				}
				_, err = g.Do(ctx, "create_order", "NEW-1", insertOrder(d, "NEW-1", &runs, 0))
				if !errors.Is(err, idempotency.ErrUnavailable) || !errors.Is(err, fencelock.ErrUnavailable) {
					t.Fatalf("Redis down: %v, want an error matching idempotency.ErrUnavailable and fencelock.ErrUnavailable", err)
				}
				if errors.Is(err, idempotency.ErrInProgress) || errors.Is(err, fencelock.ErrNotAcquired) {
					t.Fatalf("Redis down: %v also matches ErrInProgress or ErrNotAcquired: an outage is not a duplicate", err)
				}
				if runs.Load() != 1 {
					t.Errorf("the operation ran %d times, want once (only DONE-1)", runs.Load())
				}
				if rec, found, err := e.store.Get(ctx, "create_order", "NEW-1"); err != nil || found {
					t.Errorf("record of NEW-1 while Redis was down: %+v found=%v (%v), want none", rec, found, err)
				}

				// The finished request needs no lock: it is replayed.
				res, err := g.Do(ctx, "create_order", "DONE-1", insertOrder(d, "DONE-1", &runs, 0))
				if err != nil || !res.Replayed || string(res.Response) != string(first.Response) {
					t.Errorf("DONE-1 while Redis is down: %+v %v, want its stored response replayed", res, err)
				}
				if n := e.orders(t); n != 1 {
					t.Errorf("%d order rows, want 1", n)
				}

				// Redis back (empty, as after a restart without
				// persistence): the request runs. Also, the Client's
				// clean-up of the attempts that got no answer can now
				// finish, so Close does not wait for it.
				if err := e.redis.Restart(); err != nil {
					t.Fatal(err)
				}
				// Until the client has reconnected (slow on a loaded
				// machine: a wait of 300ms can pass in the dial), Do may
				// still say unavailable.
				retry := time.NewTicker(100 * time.Millisecond)
				defer retry.Stop()
				for range 100 {
					res, err = g.Do(ctx, "create_order", "NEW-1", insertOrder(d, "NEW-1", &runs, 0))
					if !errors.Is(err, idempotency.ErrUnavailable) {
						break
					}
					<-retry.C
				}
				if err != nil || res.Replayed || runs.Load() != 2 {
					t.Errorf("NEW-1 after Redis came back: %+v %v (%d runs), want it run", res, err, runs.Load())
				}
			})
		}
	}
}

// With the record store (PostgreSQL) unreachable, Do says ErrUnavailable
// (and not fencelock.ErrUnavailable: Redis is fine), not ErrInProgress and
// not a bare driver error. The database sits behind a fault proxy that
// refuses new connections and resets the open ones. The driver's error
// wrapped in "idempotency: reading ..." alone could not be told from a bad
// query.
func TestRecordStoreDownIsUnavailable(t *testing.T) {
	cfg, err := pgx.ParseConfig(servertest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		// Only an external PostgreSQL given as a Unix socket gets here; the
		// private server the harness starts listens on TCP.
		if servertest.RequireServers() {
			t.Fatalf("PostgreSQL at %s is on a Unix socket; the fault proxy needs TCP (%s=1, so this is a failure)", cfg.Host, servertest.EnvRequireServers)
		}
		t.Skipf("PostgreSQL at %s is on a Unix socket; the fault proxy needs TCP", cfg.Host)
	}
	proxy := faultproxy.New(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	host, port, _ := net.SplitHostPort(proxy.Addr())
	p, _ := strconv.Atoi(port)
	cfg.Host, cfg.Port, cfg.Fallbacks = host, uint16(p), nil
	cfg.ConnectTimeout = 5 * time.Second
	e := newEnv(t, stdlib.OpenDB(*cfg), idempotency.Postgres)

	g := idempotency.New(e.locks[0], e.store)
	ctx := context.Background()
	var runs atomic.Int64
	if _, err := g.Do(ctx, "create_order", "DONE-1", insertOrder(idempotency.Postgres, "DONE-1", &runs, 0)); err != nil {
		t.Fatal(err)
	}

	proxy.Refuse(true)
	proxy.ResetAll()
	for _, no := range []string{"DONE-1", "NEW-1"} {
		_, err := g.Do(ctx, "create_order", no, insertOrder(idempotency.Postgres, no, &runs, 0))
		t.Logf("%s: %v", no, err)
		if !errors.Is(err, idempotency.ErrUnavailable) {
			t.Errorf("%s with the database unreachable: %v, want an error matching idempotency.ErrUnavailable", no, err)
		}
		if errors.Is(err, idempotency.ErrInProgress) || errors.Is(err, fencelock.ErrUnavailable) {
			t.Errorf("%s with the database unreachable: %v matches ErrInProgress or fencelock.ErrUnavailable", no, err)
		}
		if _, _, err := e.store.Get(ctx, "create_order", no); !errors.Is(err, idempotency.ErrUnavailable) {
			t.Errorf("Store.Get of %s with the database unreachable: %v, want ErrUnavailable", no, err)
		}
	}
	if runs.Load() != 1 {
		t.Errorf("the operation ran %d times, want once", runs.Load())
	}

	// Back up: the new request runs, the old one is replayed.
	proxy.Refuse(false)
	res, err := g.Do(ctx, "create_order", "NEW-1", insertOrder(idempotency.Postgres, "NEW-1", &runs, 0))
	if err != nil || res.Replayed {
		t.Fatalf("NEW-1 after the outage: %+v %v", res, err)
	}
	if res, err := g.Do(ctx, "create_order", "DONE-1", insertOrder(idempotency.Postgres, "DONE-1", &runs, 0)); err != nil || !res.Replayed {
		t.Fatalf("DONE-1 after the outage: %+v %v", res, err)
	}
}

// A query the database refuses (here: the records table is gone) is not an
// outage: the error does not match ErrUnavailable, so a service answers 500
// rather than "retry later".
func TestStoreErrorIsNotUnavailable(t *testing.T) {
	e := setups(t)["sqlite"](t)
	ctx := context.Background()
	if _, err := e.db.ExecContext(ctx, `DROP TABLE idempotency_records`); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	_, err := idempotency.New(e.locks[0], e.store).Do(ctx, "create_order", "R-1", insertOrder(idempotency.SQLite, "R-1", &runs, 0))
	if err == nil || errors.Is(err, idempotency.ErrUnavailable) || errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("missing table: %v, want an error that is neither ErrUnavailable nor ErrInProgress", err)
	}
}
