package etcdbackend_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// Six workers of three Clients share a semaphore of 2 permits: never more
// than 2 inside, every permit's fence is new, and all of them get their
// turns (a release wakes the waiters through the etcd watch).
func TestSemaphoreBoundsHolders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	inside, most, entries := 0, 0, 0
	fences := map[int64]bool{}
	var wg sync.WaitGroup
	for c := range 3 {
		sem := newLocks(t).Semaphore("pool", 2)
		for range 2 {
			wg.Go(func() {
				for range 8 {
					p, err := sem.Acquire(ctx, 10*time.Second, fencelock.WithWait(time.Minute))
					if err != nil {
						t.Errorf("client %d: %v", c, err)
						return
					}
					mu.Lock()
					inside++
					entries++
					most = max(most, inside)
					if fences[p.Fence()] {
						t.Errorf("fence %d handed out twice", p.Fence())
					}
					fences[p.Fence()] = true
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					mu.Lock()
					inside--
					mu.Unlock()
					if err := p.Release(ctx); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Wait()
	if most > 2 || entries != 48 {
		t.Fatalf("%d permits taken, at most %d holders at once; want 48 and at most 2", entries, most)
	}
	t.Logf("48 permits, at most %d at once", most)
}
