package idempotency_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/idempotency"
	"github.com/fencelock/fencelock/internal/redisserver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// An order request submitted twice runs once; the second submission gets the
// first response back.
func ExampleGuard_Do() {
	srv, err := redisserver.Start(redisserver.Options{}) // your Redis
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()

	dir, _ := os.MkdirTemp("", "idempotency-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "orders.db")+"?_pragma=busy_timeout(5000)")
	defer db.Close()
	ctx := context.Background()
	db.ExecContext(ctx, `CREATE TABLE orders (request_no TEXT PRIMARY KEY, item TEXT)`)
	store, _ := idempotency.NewStore(db, idempotency.SQLite, "idempotency_records")
	store.Migrate(ctx)
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
