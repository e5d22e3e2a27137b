package memorybackend_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
)

// holderLearnsOfLoss is a test of code that holds a lock, in virtual time:
// inside a testing/synctest bubble the backend's leases, the Client's
// renewals and the test's sleeps all run on the bubble's clock, so a
// 30-second lease runs out at once and always in the same order.
//
// The store stops answering renewals (a partition). The holder must learn
// that its lock is lost before the store's lease ends, so that it stops
// writing before another process can take the lock; the next holder gets
// a larger fence.
func holderLearnsOfLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New() // made inside the bubble
		defer store.Close()
		locks := fencelock.New(store)
		defer locks.Close()
		ctx := context.Background()

		const lease = 30 * time.Second
		lk, err := locks.Acquire(ctx, "report", lease)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		store.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Refuse: true})

		<-lk.Done() // virtual time: returns at once in real time
		if !errors.Is(lk.Err(), fencelock.ErrLost) {
			t.Fatalf("lock ended with %v, want ErrLost", lk.Err())
		}
		if held := time.Since(start); held >= lease {
			t.Fatalf("holder learned of the loss after %v, not before the lease's %v", held, lease)
		}

		time.Sleep(lease - time.Since(start)) // the store's lease ends
		next, err := locks.TryAcquire(ctx, "report", lease)
		if err != nil {
			t.Fatal(err)
		}
		if next.Fence() <= lk.Fence() {
			t.Fatalf("next holder's fence %d, want more than %d", next.Fence(), lk.Fence())
		}
		if err := next.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A test of code that holds a lock, in virtual time with testing/synctest;
// the whole file is the example. It runs as TestExampleSynctest.
func Example_synctest() {}
