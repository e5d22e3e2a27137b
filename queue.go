package fencelock

import (
	"sync"

	"github.com/fencelock/fencelock/driver"
)

// waitQueues line up the goroutines of one Client that wait for the same
// key. Only the head of a line contends with other processes (one attempt
// per wake-up); the others wait for their turn. So a release makes one
// attempt per waiting process, not one per waiting goroutine, and the
// goroutines of a process get the lock in the order they asked for it.
type waitQueues struct {
	mu    sync.Mutex
	lines map[string][]*place
	// held counts the plain locks this Client holds, by key: while it
	// holds one, its waiters for the key make no attempt (it would be
	// refused, and mark the lock as waited for, which stops a hand-off);
	// the lock's end wakes the head of the line.
	held map[string]int
	// watching counts the calls of this Client that watch for a key's
	// releases (waiter.subscribe), by what they watch: while one does, the
	// backend's notifications for it are flowing, and another call for
	// the same watches before its first attempt (acquireWaiting).
	watching map[watched]int
}

// watched is what a waiter watches: the releases of key's hold of kind
// (a lock, a semaphore, an RWLock's read or write hold), plainly or in a
// fair line (which also needs the backend's grant notifications).
type watched struct {
	key  string
	kind Kind
	fair bool
}

// place is a place in a line.
type place struct {
	turn chan struct{} // closed when the place reaches the head
	// afterAcquire is set before turn is closed when the waiter before took
	// the lock: the new head then waits for its release instead of trying.
	afterAcquire bool
	wake         chan struct{} // a release by this Client; buffered
	turnTaken    bool          // the owner of the place has seen its turn come (its own field)

	// For hand-offs (driver.Lines.HandOff): the waiter's acquire request, and the
	// lock a release handed it (buffered, at most one: one offer at a time).
	req    driver.Request
	handed chan handedLock

	// Guarded by the waitQueues' mutex.
	offered bool // a release that may hand the lock to this place is in flight
	unsure  bool // such a release failed: the waiter's token may hold the lock
	closed  bool // the waiter is leaving: no more offers
}

// reentrant reports whether the waiter acquires for an owner of its own
// (WithOwner, Campaign, RunJob) rather than for its token alone.
func (w *place) reentrant() bool { return w.req.Owner != w.req.Token }

// handOffable reports whether a hand-off can serve the waiter. It takes the
// lock for the waiter's token as its own owner (driver.Lines.HandOff), so it
// cannot serve a re-entrant waiter, whose hold must carry its owner (so
// that the owner's other acquisitions re-enter it); and it does not tell
// change watchers of the new holder, which a waiter with Notify
// (Campaign's, for Observe) needs. Such a waiter is woken by the release
// and takes the lock with an attempt of its own.
func (w *place) handOffable() bool { return !w.reentrant() && !w.req.Notify }

// isHead reports whether w's turn has come.
func (w *place) isHead() bool {
	select {
	case <-w.turn:
		return true
	default:
		return false
	}
}

// waiting reports whether goroutines are lined up for key.
func (q *waitQueues) waiting(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.lines[key]) > 0
}

// join adds a waiter, whose acquire request is req, at the end of key's line.
func (q *waitQueues) join(key string, req driver.Request) *place {
	w := &place{turn: make(chan struct{}), wake: make(chan struct{}, 1), req: req, handed: make(chan handedLock, 1)}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lines == nil {
		q.lines = make(map[string][]*place)
	}
	q.lines[key] = append(q.lines[key], w)
	if len(q.lines[key]) == 1 {
		close(w.turn)
	}
	return w
}

// leave removes w from key's line; if w was the head, the next waiter's turn
// begins. acquired says that w leaves holding the lock.
func (q *waitQueues) leave(key string, w *place, acquired bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w.closed = true
	line := q.lines[key]
	for i, x := range line {
		if x != w {
			continue
		}
		line = append(line[:i], line[i+1:]...)
		if i == 0 && len(line) > 0 {
			// A waiter of the same owner (WithOwner) re-enters the hold w
			// took: it attempts at once rather than waiting for w's release.
			line[0].afterAcquire = acquired && !(line[0].reentrant() && line[0].req.Owner == w.req.Owner)
			close(line[0].turn)
		}
		break
	}
	if len(line) == 0 {
		delete(q.lines, key)
	} else {
		q.lines[key] = line
	}
}

// released wakes the head of key's line after this Client released the lock,
// sooner than the release notification from the server would.
func (q *waitQueues) released(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if line := q.lines[key]; len(line) > 0 {
		select {
		case line[0].wake <- struct{}{}:
		default:
		}
	}
}

// offer picks the head of key's line for a release that may hand it the
// lock (driver.Lines.HandOff): nil when no one waits, or an offer to the head is
// already in flight, or the head is leaving, or the head is one a hand-off
// cannot serve (handOffable). The caller must settle it. Without an offer
// the release wakes the head, which attempts at once.
func (q *waitQueues) offer(key string) *place {
	q.mu.Lock()
	defer q.mu.Unlock()
	line := q.lines[key]
	if len(line) == 0 || line[0].offered || line[0].closed || len(line[0].handed) > 0 || !line[0].handOffable() {
		return nil
	}
	line[0].offered = true
	return line[0]
}

// settle ends the offer to p: h is the lock the release handed p's waiter
// (nil: none), unsure says that the release failed and may have handed it.
// A waiter that left meanwhile has it covered: one that left with the lock
// holds the same hold (its own attempt completed the hand-off as a retry),
// and one that gave up while the offer was in flight releases its token
// (withdraw).
func (q *waitQueues) settle(p *place, h *handedLock, unsure bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p.offered = false
	switch {
	case p.closed:
	case h != nil:
		select {
		case p.handed <- *h:
		default: // one offer at a time: a lock handed earlier is still there, for the same token
		}
		select {
		case p.wake <- struct{}{}:
		default:
		}
	case unsure:
		p.unsure = true
		select {
		case p.wake <- struct{}{}: // attempt now: the attempt completes a hand-off as a retry
		default:
		}
	}
}

// withdraw stops offers to p, whose waiter gives up, and reports whether a
// release may have handed it the lock (an offer in flight, a handed lock
// not taken, a failed offer): the waiter must then release its token.
func (q *waitQueues) withdraw(p *place) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	p.closed = true
	return p.offered || p.unsure || len(p.handed) > 0
}

// takeUnsure reports, once, that a release that may have handed p's waiter
// the lock failed.
func (q *waitQueues) takeUnsure(p *place) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	u := p.unsure
	p.unsure = false
	return u
}

// took counts a plain lock of key that this Client holds.
func (q *waitQueues) took(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.held == nil {
		q.held = make(map[string]int)
	}
	q.held[key]++
}

// ended uncounts a plain lock of key that took counted and, with wake, wakes
// the head of key's line: it may now attempt.
func (q *waitQueues) ended(key string, wake bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.held[key]--; q.held[key] <= 0 {
		delete(q.held, key)
	}
	if line := q.lines[key]; wake && len(line) > 0 {
		select {
		case line[0].wake <- struct{}{}:
		default:
		}
	}
}

// holding reports whether this Client holds a plain lock of key.
func (q *waitQueues) holding(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held[key] > 0
}

// watchStarted counts a call that began watching w.
func (q *waitQueues) watchStarted(w watched) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.watching == nil {
		q.watching = make(map[watched]int)
	}
	q.watching[w]++
}

// watchStopped uncounts a call that watchStarted counted.
func (q *waitQueues) watchStopped(w watched) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.watching[w]--; q.watching[w] <= 0 {
		delete(q.watching, w)
	}
}

// isWatched reports whether a call of this Client watches w.
func (q *waitQueues) isWatched(w watched) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.watching[w] > 0
}
