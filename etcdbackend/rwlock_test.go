package etcdbackend_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// Readers and writers of three Clients on one read-write lock: a writer is
// always alone, readers share, and both kinds get their turns (writers are
// preferred, and a writer's release lets the waiting readers in).
func TestRWLockReadersShareWritersAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	readers, writers, reads, writes, mostReaders := 0, 0, 0, 0, 0
	var bad []string
	enter := func(write bool) {
		mu.Lock()
		defer mu.Unlock()
		if write {
			if readers > 0 || writers > 0 {
				bad = append(bad, "a writer entered beside others")
			}
			writers++
			writes++
		} else {
			if writers > 0 {
				bad = append(bad, "a reader entered beside the writer")
			}
			readers++
			reads++
			mostReaders = max(mostReaders, readers)
		}
	}
	leave := func(write bool) {
		mu.Lock()
		defer mu.Unlock()
		if write {
			writers--
		} else {
			readers--
		}
	}
	var wg sync.WaitGroup
	for c := range 3 {
		rw := newLocks(t).RWLock("doc")
		for i := range 3 {
			write := (c+i)%3 == 0
			wg.Go(func() {
				for range 6 {
					acquire := rw.AcquireRead
					if write {
						acquire = rw.AcquireWrite
					}
					lk, err := acquire(ctx, 10*time.Second, fencelock.WithWait(time.Minute))
					if err != nil {
						t.Error(err)
						return
					}
					enter(write)
					time.Sleep(15 * time.Millisecond)
					leave(write)
					if err := lk.Release(ctx); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Wait()
	for _, b := range bad {
		t.Error(b)
	}
	if reads != 36 || writes != 18 {
		t.Fatalf("%d reads and %d writes, want 36 and 18", reads, writes)
	}
	t.Logf("%d reads (at most %d at once), %d writes", reads, mostReaders, writes)
}
