package idempotency_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/idempotency"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"
)

// An order request submitted twice runs once; the second submission gets the
// first response back.
func ExampleGuard_Do() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()

	// The orders and the idempotency records in one SQLite database (a
	// file in a temporary directory here; PostgreSQL works the same).
	dir, err := os.MkdirTemp("", "idempotency-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "orders.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (request_no TEXT PRIMARY KEY, item TEXT)`); err != nil {
		fmt.Println(err)
		return
	}
	store, err := idempotency.NewStore(db, idempotency.SQLite, "idempotency_records")
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := store.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	guard := idempotency.New(locks, store)

	createOrder := func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		// The order and the record commit together.
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES ('R-1001', 'book')`); err != nil {
			return nil, err
		}
		return []byte(`{"order":"R-1001","status":"created"}`), nil
	}
	for range 2 {
		res, err := guard.Do(ctx, "create_order", "R-1001", createOrder)
		fmt.Println(string(res.Response), "replayed:", res.Replayed, err)
	}
	// Output:
	// {"order":"R-1001","status":"created"} replayed: false <nil>
	// {"order":"R-1001","status":"created"} replayed: true <nil>
}
