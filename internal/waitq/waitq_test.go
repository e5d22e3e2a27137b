package waitq

import (
	"strconv"
	"testing"

	"github.com/fencelock/fencelock/driver"
)

// TestLinesAreKeptPerKey lines up two waiters on each of many keys, which
// spread over every shard, and checks that each key's line, count and
// offers are its own: turns pass within a line, a hand-off reaches the
// head of its own line only.
func TestLinesAreKeptPerKey(t *testing.T) {
	var q Queues
	const keys = 4 * shardCount
	type line struct{ first, second *Place }
	lines := make([]line, keys)
	for i := range keys {
		key := "key-" + strconv.Itoa(i)
		req := driver.Request{Ref: driver.Ref{Key: key, Token: "t" + strconv.Itoa(i)}, Owner: "t" + strconv.Itoa(i)}
		lines[i] = line{q.Join(key, req), q.Join(key, req)}
		q.Took(key)
	}
	for i, l := range lines {
		key := "key-" + strconv.Itoa(i)
		if !l.first.IsHead() || l.second.IsHead() {
			t.Fatalf("%s: the first waiter's turn must have come, the second's not", key)
		}
		if !q.Waiting(key) || !q.Holding(key) {
			t.Fatalf("%s: want waiting and held", key)
		}
		p := q.Offer(key)
		if p != l.first {
			t.Fatalf("%s: offered %p, want the head %p", key, p, l.first)
		}
		q.Settle(p, &Handed{Res: driver.Result{Acquired: true, Fence: int64(i + 1)}}, false)
	}
	for i, l := range lines {
		key := "key-" + strconv.Itoa(i)
		select {
		case h := <-l.first.Handed:
			if h.Res.Fence != int64(i+1) {
				t.Fatalf("%s: handed fence %d, want %d", key, h.Res.Fence, i+1)
			}
		default:
			t.Fatalf("%s: the head was handed nothing", key)
		}
		q.Ended(key, false)
		q.Leave(key, l.first, true)
		if !l.second.IsHead() || !l.second.AfterAcquire {
			t.Fatalf("%s: the second waiter's turn must come after the first acquired", key)
		}
		if q.Holding(key) {
			t.Fatalf("%s: still counted as held", key)
		}
		q.Leave(key, l.second, false)
		if q.Waiting(key) {
			t.Fatalf("%s: still waiting after both left", key)
		}
	}
}
