package rueidistransport_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend/rueidistransport"
	"github.com/redis/rueidis"
)

// A Client on rueidis: the same locks as a Client on go-redis, on the same
// server.
func Example() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	locks := fencelock.New(rueidistransport.NewBackend(client))
	defer locks.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lk, err := locks.Acquire(ctx, "example:report", 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("held with a fence:", lk.Fence() > 0)
	if err := lk.Release(ctx); err != nil {
		panic(err)
	}
	// Output: held with a fence: true
}
