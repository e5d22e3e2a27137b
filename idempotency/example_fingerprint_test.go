package idempotency_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/idempotency"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"
)

// A request number sent again with the same payload gets the first
// response; sent with another payload, it is refused instead of answered
// with a response to a different request. Old records are purged.
func ExampleWithFingerprint() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	// One fence counter per request number: let idle ones expire.
	locks := fencelock.New(redisbackend.New(rdb, redisbackend.WithFenceCounterExpiry(24*time.Hour)))
	defer locks.Close()

	dir, err := os.MkdirTemp("", "idempotency-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ctx := context.Background()
	store, err := idempotency.NewStore(db, idempotency.SQLite, "idempotency_records")
	if err == nil {
		err = store.Migrate(ctx)
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	guard := idempotency.New(locks, store)

	pay := func(body string) {
		res, err := guard.Do(ctx, "payment", "P-77", func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			return []byte("paid " + body), nil
		}, idempotency.WithFingerprint([]byte(body)))
		switch {
		case errors.Is(err, idempotency.ErrPayloadMismatch):
			fmt.Println("refused:", err)
		case err != nil:
			fmt.Println(err)
		default:
			fmt.Printf("%s (replayed: %v)\n", res.Response, res.Replayed)
		}
	}
	pay(`{"amount":10}`)
	pay(`{"amount":10}`)
	pay(`{"amount":99}`)

	n, err := store.Purge(ctx, 7*24*time.Hour) // from a periodic job: records older than a week
	fmt.Println("purged:", n, err)
	// Output:
	// paid {"amount":10} (replayed: false)
	// paid {"amount":10} (replayed: true)
	// refused: idempotency: request key reused with a different payload: payment "P-77"
	// purged: 0 <nil>
}
