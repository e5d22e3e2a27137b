package waitq

import (
	"strconv"
	"sync/atomic"
	"testing"
)

// BenchmarkUncontendedCycle runs the calls an uncontended Acquire and
// Release make here (acquire.go, release.go), from many goroutines on keys
// of their own, as a busy process does: what the Queues cost when nobody
// waits, mostly the mutexes the goroutines meet on.
func BenchmarkUncontendedCycle(b *testing.B) {
	var q Queues
	var ids atomic.Int64
	b.SetParallelism(32) // × GOMAXPROCS 2 on the project's machine
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		key := "key-" + strconv.FormatInt(ids.Add(1), 10)
		w := Watched{Key: key}
		for pb.Next() {
			if q.Waiting(key) || q.Holding(key) || q.IsWatched(w) {
				b.Error("a key of its own is busy")
				return
			}
			q.Took(key)
			if q.Offer(key) != nil {
				b.Error("an offer with nobody waiting")
				return
			}
			q.Released(key)
			q.Ended(key, true)
		}
	})
}
