package memorybackend_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
)

// Code that takes a lock, tested without Redis: while the store refuses
// every request, as a Redis that is down would, the call says the store is
// unavailable and nothing is held; once it answers again, the lock is taken.
func Example_outage() {
	store := memorybackend.New()
	defer store.Close()
	locks := fencelock.New(store)
	defer locks.Close()
	ctx := context.Background()

	clear := store.Inject(memorybackend.Fault{Ops: memorybackend.AllOps, Refuse: true})
	_, err := locks.TryAcquire(ctx, "report", time.Minute)
	fmt.Println("store down, unavailable:", errors.Is(err, fencelock.ErrUnavailable))
	clear()

	lk, err := locks.TryAcquire(ctx, "report", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("store back, held:", lk.Held())
	if err := lk.Release(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// store down, unavailable: true
	// store back, held: true
}
