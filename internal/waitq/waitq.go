// Package waitq lines up the goroutines of one Client that wait for the
// same key, and carries the locks a release by the Client hands to them.
package waitq

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Queues line up the goroutines of one Client that wait for the same
// key. Only the head of a line contends with other processes (one attempt
// per wake-up); the others wait for their turn. So a release makes one
// attempt per waiting process, not one per waiting goroutine, and the
// goroutines of a process get the lock in the order they asked for it.
//
// Every acquire and release of the Client passes through here a few times,
// and nothing here spans keys: the keys are spread over shards, each with
// a mutex of its own, so that calls for different keys do not queue on one
// mutex. The zero value is ready to use.
type Queues struct {
	shards [shardCount]shard
}

// shardCount is the number of shards: enough that the goroutines of a busy
// process rarely meet on one.
const shardCount = 32

// shardSeed spreads keys over the shards.
var shardSeed = maphash.MakeSeed()

// A shard holds the lines and counts of the keys that hash to it.
type shard struct {
	mu    sync.Mutex
	lines map[string][]*Place
	// held counts the plain locks this Client holds, by key: while it
	// holds one, its waiters for the key make no attempt (it would be
	// refused, and mark the lock as waited for, which stops a hand-off);
	// the lock's end wakes the head of the line.
	held map[string]int
	// watching counts the calls of this Client that watch for a key's
	// releases (waiter.subscribe), by what they watch: while one does, the
	// backend's notifications for it are flowing, and another call for
	// the same watches before its first attempt (acquireWaiting).
	watching map[Watched]int

	_ [32]byte // a cache line each: goroutines on other shards do not invalidate this one's mutex
}

// shard returns the shard of key.
func (q *Queues) shard(key string) *shard {
	return &q.shards[maphash.String(shardSeed, key)%shardCount]
}

// Watched is what a waiter watches: the releases of key's hold of kind
// (a lock, a semaphore, an RWLock's read or write hold), plainly or in a
// fair line (which also needs the backend's grant notifications).
type Watched struct {
	Key  string
	Kind driver.Kind
	Fair bool
}

// Place is a waiter's place in a line.
type Place struct {
	Turn chan struct{} // closed when the place reaches the head
	// AfterAcquire is set before Turn is closed when the waiter before took
	// the lock: the new head then waits for its release instead of trying.
	AfterAcquire bool
	Wake         chan struct{} // a release by this Client; buffered
	TurnTaken    bool          // the waiter has seen its turn come (the waiter's own field)

	// For hand-offs (driver.Lines.HandOff): the waiter's acquire request, and the
	// lock a release handed it (buffered, at most one: one offer at a time).
	Req    driver.Request
	Handed chan Handed

	sh *shard // the shard of the line

	// Guarded by sh.mu.
	offered bool // a release that may hand the lock to this place is in flight
	unsure  bool // such a release failed: the waiter's token may hold the lock
	closed  bool // the waiter is leaving: no more offers
}

// Reentrant reports whether the waiter acquires for an owner of its own
// (WithOwner, Campaign, RunJob) rather than for its token alone.
func (w *Place) Reentrant() bool { return w.Req.Owner != w.Req.Token }

// handOffable reports whether a hand-off can serve the waiter. It takes the
// lock for the waiter's token as its own owner (driver.Lines.HandOff), so it
// cannot serve a re-entrant waiter, whose hold must carry its owner (so
// that the owner's other acquisitions re-enter it); and it does not tell
// change watchers of the new holder, which a waiter with Notify
// (Campaign's, for Observe) needs. Such a waiter is woken by the release
// and takes the lock with an attempt of its own.
func (w *Place) handOffable() bool { return !w.Reentrant() && !w.Req.Notify }

// IsHead reports whether w's turn has come.
func (w *Place) IsHead() bool {
	select {
	case <-w.Turn:
		return true
	default:
		return false
	}
}

// Waiting reports whether goroutines are lined up for key.
func (q *Queues) Waiting(key string) bool {
	s := q.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lines[key]) > 0
}

// Join adds a waiter, whose acquire request is req, at the end of key's line.
func (q *Queues) Join(key string, req driver.Request) *Place {
	s := q.shard(key)
	w := &Place{Turn: make(chan struct{}), Wake: make(chan struct{}, 1), Req: req, Handed: make(chan Handed, 1), sh: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lines == nil {
		s.lines = make(map[string][]*Place)
	}
	s.lines[key] = append(s.lines[key], w)
	if len(s.lines[key]) == 1 {
		close(w.Turn)
	}
	return w
}

// Leave removes w from key's line; if w was the head, the next waiter's turn
// begins. acquired says that w leaves holding the lock.
func (q *Queues) Leave(key string, w *Place, acquired bool) {
	s := q.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	w.closed = true
	line := s.lines[key]
	for i, x := range line {
		if x != w {
			continue
		}
		line = append(line[:i], line[i+1:]...)
		if i == 0 && len(line) > 0 {
			// A waiter of the same owner (WithOwner) re-enters the hold w
			// Took: it attempts at once rather than waiting for w's release.
			line[0].AfterAcquire = acquired && !(line[0].Reentrant() && line[0].Req.Owner == w.Req.Owner)
			close(line[0].Turn)
		}
		break
	}
	if len(line) == 0 {
		delete(s.lines, key)
	} else {
		s.lines[key] = line
	}
}

// Released wakes the head of key's line after this Client released the lock,
// sooner than the release notification from the server would.
func (q *Queues) Released(key string) {
	s := q.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if line := s.lines[key]; len(line) > 0 {
		select {
		case line[0].Wake <- struct{}{}:
		default:
		}
	}
}

// Offer picks the head of key's line for a release that may hand it the
// lock (driver.Lines.HandOff): nil when no one waits, or an offer to the head is
// already in flight, or the head is leaving, or the head is one a hand-off
// cannot serve (handOffable). The caller must settle it. Without an offer
// the release wakes the head, which attempts at once.
func (q *Queues) Offer(key string) *Place {
	s := q.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	line := s.lines[key]
	if len(line) == 0 || line[0].offered || line[0].closed || len(line[0].Handed) > 0 || !line[0].handOffable() {
		return nil
	}
	line[0].offered = true
	return line[0]
}

// Settle ends the offer to p: h is the lock the release handed p's waiter
// (nil: none), unsure says that the release failed and may have handed it.
// A waiter that left meanwhile has it covered: one that left with the lock
// holds the same hold (its own attempt completed the hand-off as a retry),
// and one that gave up while the offer was in flight releases its token
// (withdraw).
func (q *Queues) Settle(p *Place, h *Handed, unsure bool) {
	s := p.sh
	s.mu.Lock()
	defer s.mu.Unlock()
	p.offered = false
	switch {
	case p.closed:
	case h != nil:
		select {
		case p.Handed <- *h:
		default: // one offer at a time: a lock Handed earlier is still there, for the same token
		}
		select {
		case p.Wake <- struct{}{}:
		default:
		}
	case unsure:
		p.unsure = true
		select {
		case p.Wake <- struct{}{}: // attempt now: the attempt completes a hand-off as a retry
		default:
		}
	}
}

// Withdraw stops offers to p, whose waiter gives up, and reports whether a
// release may have handed it the lock (an offer in flight, a Handed lock
// not taken, a failed offer): the waiter must then release its token.
func (q *Queues) Withdraw(p *Place) bool {
	s := p.sh
	s.mu.Lock()
	defer s.mu.Unlock()
	p.closed = true
	return p.offered || p.unsure || len(p.Handed) > 0
}

// TakeUnsure reports, once, that a release that may have handed p's waiter
// the lock failed.
func (q *Queues) TakeUnsure(p *Place) bool {
	s := p.sh
	s.mu.Lock()
	defer s.mu.Unlock()
	u := p.unsure
	p.unsure = false
	return u
}

// Took counts a plain lock of key that this Client holds.
func (q *Queues) Took(key string) {
	s := q.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = make(map[string]int)
	}
	s.held[key]++
}

// Ended uncounts a plain lock of key that Took counted and, with wake, wakes
// the head of key's line: it may now attempt.
func (q *Queues) Ended(key string, Wake bool) {
	s := q.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[key]--; s.held[key] <= 0 {
		delete(s.held, key)
	}
	if line := s.lines[key]; Wake && len(line) > 0 {
		select {
		case line[0].Wake <- struct{}{}:
		default:
		}
	}
}

// Holding reports whether this Client holds a plain lock of key.
func (q *Queues) Holding(key string) bool {
	s := q.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[key] > 0
}

// WatchStarted counts a call that began watching w.
func (q *Queues) WatchStarted(w Watched) {
	s := q.shard(w.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watching == nil {
		s.watching = make(map[Watched]int)
	}
	s.watching[w]++
}

// WatchStopped uncounts a call that WatchStarted counted.
func (q *Queues) WatchStopped(w Watched) {
	s := q.shard(w.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watching[w]--; s.watching[w] <= 0 {
		delete(s.watching, w)
	}
}

// IsWatched reports whether a call of this Client watches w.
func (q *Queues) IsWatched(w Watched) bool {
	s := q.shard(w.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watching[w] > 0
}

// Handed is a lock a release by this Client handed to one of its waiters
// (driver.Lines.HandOff).
type Handed struct {
	Res driver.Result
	// Sent is when the release request was sent: the store began the
	// waiter's lease after that, so the waiter's local deadline counts
	// from it.
	Sent time.Time
}
