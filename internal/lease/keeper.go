// Package lease is a Client's lease keeper: it renews the holds of one
// Client in batches and declares lost those whose local deadline passes.
// It knows a hold only as a Holder (the fencelock package's Lock), whose
// lease state it reads and changes through the Holder's methods.
//
// Lock order: the Keeper guards its schedule, and each hold's place in it
// (Entry), with Keeper.mu, and takes a Holder's lock while holding it;
// nothing else may nest them. Code holding either never calls the store or
// a callback, and code holding a Holder's lock never calls into the
// Keeper. The Keeper holds its mu only for bounded work (a few hundred
// schedule entries at most), never across a store call.
package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Holder is one hold the Keeper watches. Its methods named ...Locked need
// the Holder locked (Lock); the others must not be called so.
type Holder interface {
	Lock()
	Unlock()
	// Ref names the hold; it never changes.
	Ref() driver.Ref
	// RenewInterval is the hold's automatic renewal interval (0: none); it
	// never changes.
	RenewInterval() time.Duration

	// NextEventLocked returns when the Keeper must next look at the hold:
	// its next renewal (renewal true), or its local deadline.
	NextEventLocked() (at time.Time, renewal bool)
	// EndedLocked reports that the hold ended (released or lost): the
	// Keeper drops it.
	EndedLocked() bool
	// ExpiredLocked reports that the hold counts as held but its local
	// deadline has passed at now: the Keeper calls Expire.
	ExpiredLocked(now time.Time) bool
	// RenewalDueLocked reports that the hold may go in a renewal batch
	// gathered at now.
	RenewalDueLocked(now time.Time) bool
	// BeginRenewalLocked takes the hold's renewal turn for a batch.
	BeginRenewalLocked()
	// EndRenewalTurnLocked gives the turn back unsent.
	EndRenewalTurnLocked()
	// DeadlineLocked is the hold's local deadline.
	DeadlineLocked() time.Time
	// RenewRequestLocked is the request that renews the hold.
	RenewRequestLocked() driver.RenewRequest

	// Expire declares the hold lost at its deadline.
	Expire()
	// FinishRenewal applies the result of a renewal of ttl sent at sent,
	// and ends the renewal turn.
	FinishRenewal(sent time.Time, ttl time.Duration, res driver.RenewResult)
}

// Entry is a hold's place in the Keeper's schedule, kept in the hold
// itself (the zero value: not watched) so that the schedule's entries are
// two words and moving one touches no Holder.
type Entry struct {
	h            Holder
	interval     time.Duration // h.RenewInterval()
	slot         int32         // 1 + the place in the schedule; 0: not in it
	schedRenewal bool          // the schedule entry is the next renewal, not the deadline
}

// ErrStopped is the error of Add once StopAccepting was called.
var ErrStopped = errors.New("lease: keeper stopped accepting holds")

// RenewTimeout bounds one automatic renewal request: half the interval, so
// that a request the server never answers leaves time to retry before the
// lease deadline.
func RenewTimeout(interval time.Duration) time.Duration {
	return max(interval/2, time.Millisecond)
}

// Keeper watches the leases of every hold a Client has. It keeps them
// in a schedule ordered by when each next needs it: a lock with automatic
// renewal at its next renewal, otherwise (and while a renewal is in flight)
// at its local lease deadline. One goroutine, the loop, sleeps until the
// earliest of those times (or keeperMaxSleep), takes off the schedule only
// the locks whose time has come, and
//   - declares lost those whose deadline has passed without a successful
//     renewal (the server is unreachable or paused, or the lock never
//     renews), at that deadline, whatever renewals are in flight;
//   - gathers those due for renewal into batches of at most MaxRenewBatch,
//     one backend call (one round trip) each, which workers send in the
//     order the locks came due: one at a time while the batches are ahead
//     of time, up to MaxRenewWorkers at once when a batch that is due waits
//     behind another;
//   - takes along, a little early, locks whose renewal comes due soon (see
//     tick), up to renewBurst batches, so that a steady stream of renewals
//     goes out as a few batches back to back rather than one batch per
//     wake-up.
//
// So a wake-up costs O(due × log n) for n held locks, never a walk of all of
// them, and Acquire and Release (add, remove: O(log n)) wait for the keeper
// only while it moves a bounded number of entries (keeperChunk). The
// goroutines are the loop and up to MaxRenewWorkers workers, started when
// there are batches to send and ending when there have been none for
// workerLinger, whatever the number of locks. A batch that gets no answer for a quarter of its timeout
// (a paused server, or one Cluster node of those the batch goes to) stops
// counting against MaxRenewWorkers, so that the other batches are not held
// up behind it for the rest of its timeout; up to maxStalledWorkers may wait
// so.
//
// It takes Keeper.mu, then a Holder's lock (see the package documentation
// for the lock order).
type Keeper struct {
	// renew sends a batch of renewals (the store's Renew); done is told of
	// each batch sent, with its results (hooks).
	renew func(context.Context, []driver.RenewRequest) ([]driver.RenewResult, error)
	done  func(sent time.Time, results []driver.RenewResult, err error, n int)

	// ctx bounds the renewal requests; it is cancelled by stop, which Close
	// calls only after it has released the locks, so that no lock lapses
	// because the Client is closing.
	ctx    context.Context
	cancel context.CancelFunc

	// epoch is the origin of the schedule's times (monotonic nanoseconds).
	epoch time.Time

	mu        sync.Mutex
	sched     schedule          // every watched hold, with Entry.slot
	byToken   map[string]*Entry // every watched hold, by its token, until it ends: see Find
	accepting bool              // false once Close has begun releasing
	wakeAt    int64             // when the loop will look again, unless woken
	pending   []*Entry          // the renewal batch being gathered by the loop
	pendingAt int64             // when the first lock of pending came due (schedule time)
	queue     []renewBatch      // batches waiting for a worker, oldest first
	workers   int               // worker goroutines running
	sending   int               // of those, how many send a batch (renew)
	stalled   int               // of those, how many wait for a batch that counts as stalled (send)
	idle      int               // of those, how many wait for work (workerLinger) unclaimed

	wake  chan struct{} // buffered: a pending "look again"
	pokes atomic.Int64  // wake-ups sent on wake (for tests)
	work  chan struct{} // buffered: a claim on an idle worker (spawnLocked), one per idle decrement
	quit  chan struct{}
	wg    sync.WaitGroup // the loop and the workers
}

const (
	// MaxRenewBatch caps one renewal round trip; the rest go in the next.
	// Redis runs a batch's scripts back to back while every other request
	// (another Acquire of this process, or of any other) waits, so a batch
	// is kept to what the server runs in well under a millisecond. Measured
	// (bench/peers, 10,000 held locks renewed every 10s), another key's
	// lock+unlock had a p99 of 5.2 ms with batches of 512, 2.5 ms with 64
	// and 1.2 ms without renewals; smaller batches cost more client CPU per
	// renewal (14.8% of a core at 100,000 locks with 32, 12.2% with 64).
	MaxRenewBatch = 64

	// MaxRenewWorkers caps the renewal batches in flight at once, and so
	// the keeper's goroutines: a sweep of many locks goes out as a stream of
	// bounded batches instead of one burst. Two keep the server busy while
	// the client reads one batch's replies and writes the next; each more
	// would add a batch to another request's wait. The second is used only
	// when a batch with a lock whose renewal time has come waits behind
	// another (many locks due at once, or more due than one worker
	// sends): batches taken early go one at a time, so that another
	// request waits behind one batch at most.
	MaxRenewWorkers = 2

	// renewBurst is how many batches a wake-up of the loop that renews a
	// lock may fill with locks taken early: a lock whose renewal is due
	// within a fifth of its interval goes along. Each wake-up of an idle
	// process costs far more than the same work back to back (threads and
	// virtual CPUs to wake), so locks that come due in a steady stream
	// (many locks, taken over some seconds) are renewed a few batches at a
	// time. Measured (100,000 locks renewed every 10s, with the
	// lock+unlock probe every 10ms, 2026-12-02): BenchmarkHeldLocks, 4
	// runs each, 13.8% of a core with one batch per wake-up and two in
	// flight, 12.2% with 4 batches a wake-up sent one at a time, 12.0% with
	// 8, the probe's p99 3.9-4.0 ms in all three; bench/peers (--held
	// 100000, 4 runs each, one batch a wake-up and 4 in turns) 14.8% and
	// 13.3% of a core on average and 32% and 24% in the busiest second, the
	// probe's p99 6.0 and 5.9 ms (maximum 20 and 12.5 ms) on a busier machine.
	renewBurst = 4

	// A batch unanswered for a quarter of its timeout (at least
	// minRenewStall) counts as stalled, and another worker may start if
	// batches wait; at most maxStalledWorkers workers run in all. A server
	// that is merely slow answers well within that, and more batches in
	// flight would only make it slower.
	minRenewStall     = 100 * time.Millisecond
	maxStalledWorkers = 64

	// workerLinger is how long a worker with nothing to send waits for
	// the next batch before it ends. A new goroutine's stack grows on each
	// batch's way through the Redis client (a tenth of the keeper's CPU
	// with 100,000 held locks, when each batch started a worker); a
	// worker that lingers grows it once. Held locks come due in a steady
	// stream, so the workers then live on; a Client with a few locks
	// renewed every few seconds has none between renewals.
	workerLinger = time.Second

	// keeperChunk caps the schedule entries the loop handles per hold of
	// Keeper.mu, so that Acquire and Release never wait long for it
	// when very many locks come due at once.
	keeperChunk = 256

	// keeperMaxSleep is the longest the loop sleeps, even with nothing
	// due. A lock whose first event (renewal or deadline) comes after the
	// loop's planned look needs no wake-up, so an Acquire of a lock with a
	// lease of a second or more never switches to the loop's goroutine:
	// without this bound, every Acquire while no other lock is held woke
	// it (a futex call to wake another thread, and that thread's work: 2 of
	// the 4.5 futex calls per uncontended Acquire+Release of one goroutine
	// on the project's machine). The cost: four looks a second at an empty
	// schedule.
	keeperMaxSleep = 250 * time.Millisecond
)

// renewBatch is a batch of locks to renew, as queued for the workers.
type renewBatch struct {
	locks []*Entry
	dueAt int64 // when its first lock comes due (schedule time); the others come due later
}

// batchPool recycles the keeper's batch slices (never the requests handed to
// the backend, which a backend may still read after the call gave up).
var batchPool = sync.Pool{New: func() any { return make([]*Entry, 0, MaxRenewBatch) }}

// New starts a Keeper whose renewals go to renew, and are told to done
// (from the goroutine that sent them, with the time they were sent and the
// number of holds in the batch). Stop ends it.
func New(renew func(context.Context, []driver.RenewRequest) ([]driver.RenewResult, error),
	done func(sent time.Time, results []driver.RenewResult, err error, n int)) *Keeper {
	k := &Keeper{
		renew:     renew,
		done:      done,
		epoch:     time.Now(),
		accepting: true,
		byToken:   make(map[string]*Entry),
		wake:      make(chan struct{}, 1),
		work:      make(chan struct{}, maxStalledWorkers),
		quit:      make(chan struct{}),
	}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.wg.Add(1)
	go k.loop()
	return k
}

// at is t on the schedule's clock.
func (k *Keeper) at(t time.Time) int64 { return int64(t.Sub(k.epoch)) }

// timeAt is the inverse of at.
func (k *Keeper) timeAt(at int64) time.Time { return k.epoch.Add(time.Duration(at)) }

// Add starts watching h, whose place in the schedule is l (which must not
// be watched already). It fails with ErrStopped once StopAccepting was
// called.
func (k *Keeper) Add(l *Entry, h Holder) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.accepting {
		return ErrStopped
	}
	l.h, l.interval = h, h.RenewInterval()
	h.Lock()
	at, renewal := k.nextEventLocked(l)
	h.Unlock()
	l.schedRenewal = renewal
	k.sched.push(l, at)
	k.byToken[h.Ref().Token] = l
	if at < k.wakeAt {
		k.poke()
	}
	return nil
}

// Remove stops watching the hold of l.
func (k *Keeper) Remove(l *Entry) {
	k.mu.Lock()
	k.sched.remove(l)
	if l.h != nil && k.byToken[l.h.Ref().Token] == l {
		delete(k.byToken, l.h.Ref().Token)
	}
	k.mu.Unlock()
}

// Find returns the watched Holder of ref, or nil: for ReleaseToken and
// ForceRelease, which release a hold by its token and end its *Lock at
// once when it is here (its waiters would otherwise wait for it to learn
// of the loss at its next renewal, or its lease deadline). A hold removed
// (its Release has begun) is no longer found. ref's Kind is not compared:
// a token names one hold, of whichever kind.
func (k *Keeper) Find(ref driver.Ref) Holder {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l := k.byToken[ref.Token]; l != nil {
		if r := l.h.Ref(); r.Namespace == ref.Namespace && r.Key == ref.Key {
			return l.h
		}
	}
	return nil
}

// Reschedule moves the hold of l to its next event after its lease changed
// (a renewal or Refresh ended), and makes the loop look again if that is
// earlier than the loop's planned wake-up.
func (k *Keeper) Reschedule(l *Entry) {
	k.mu.Lock()
	if k.rescheduleLocked(l) {
		k.poke()
	}
	k.mu.Unlock()
}

// rescheduleLocked is Reschedule without the poke, which it reports is
// needed. k.mu must be held.
func (k *Keeper) rescheduleLocked(l *Entry) bool {
	if !k.sched.contains(l) {
		return false // no longer watched: released, lost or expired
	}
	l.h.Lock()
	at, renewal := k.nextEventLocked(l)
	l.h.Unlock()
	l.schedRenewal = renewal
	k.sched.update(l, at)
	return at < k.wakeAt
}

// nextEventLocked returns when the keeper must next look at l, and whether
// that is a renewal (rather than the deadline). l's Holder must be locked.
func (k *Keeper) nextEventLocked(l *Entry) (at int64, renewal bool) {
	t, renewal := l.h.NextEventLocked()
	return k.at(t), renewal
}

// StopAccepting refuses new holds (Add) and returns those watched now.
func (k *Keeper) StopAccepting() []Holder {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.accepting = false
	held := make([]Holder, 0, k.sched.len())
	for _, e := range k.sched.entries {
		held = append(held, e.l.h)
	}
	return held
}

// Stop ends the loop, cancels the renewals in flight and waits for the
// loop and the workers.
func (k *Keeper) Stop() {
	close(k.quit)
	k.cancel()
	k.wg.Wait()
}

// Stopped reports that Stop has begun: the renewals in flight are being
// cancelled.
func (k *Keeper) Stopped() bool { return k.ctx.Err() != nil }

// Pokes returns how many times the loop was woken before its planned look
// (for tests).
func (k *Keeper) Pokes() int64 { return k.pokes.Load() }

func (k *Keeper) poke() {
	select {
	case k.wake <- struct{}{}:
		k.pokes.Add(1)
	default:
	}
}

func (k *Keeper) loop() {
	defer k.wg.Done()
	defer k.dropPending()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next, more := k.tick(time.Now())
		if more {
			select {
			case <-k.quit:
				return
			default:
				continue
			}
		}
		timer.Reset(time.Until(next))
		select {
		case <-k.quit:
			return
		case <-k.wake:
		case <-timer.C:
		}
	}
}

// dropPending gives back the renewal turns of a batch that was still being
// gathered when the loop stopped.
func (k *Keeper) dropPending() {
	k.mu.Lock()
	pending := k.pending
	k.pending = nil
	k.mu.Unlock()
	for _, l := range pending {
		l.h.Lock()
		l.h.EndRenewalTurnLocked()
		l.h.Unlock()
	}
}

// tick takes off the schedule up to keeperChunk locks whose time has come:
// it declares lost those whose deadline has passed and gathers those due
// for renewal into batches for the workers. A lock whose renewal is due
// within a fifth of its interval goes along, a little early, when a batch
// is being gathered and has room, or, up to renewBurst batches, when this
// wake-up renews a lock anyway: locks due at about the same time share a
// round trip, and locks due in a steady stream share a wake-up. tick
// returns when to look again, or more: look again at once, there may be
// more to do now.
func (k *Keeper) tick(now time.Time) (next time.Time, more bool) {
	nowAt := k.at(now)
	var expired []Holder
	renewing := 0 // locks taken for renewal by this tick

	k.mu.Lock()
	for n := 0; k.sched.len() > 0; n++ {
		e := k.sched.top()
		if e.at > nowAt {
			gathering := len(k.pending) > 0 || (renewing > 0 && renewing < renewBurst*MaxRenewBatch)
			early := e.l.schedRenewal && gathering && e.at-int64(e.l.interval/5) <= nowAt
			if !early {
				break
			}
		}
		if n == keeperChunk {
			more = true
			break
		}
		l := e.l
		h := l.h
		h.Lock()
		switch {
		case h.EndedLocked():
			k.sched.pop() // ended: its end removes it too
		case h.ExpiredLocked(now):
			k.sched.pop()
			expired = append(expired, h)
		case h.RenewalDueLocked(now):
			h.BeginRenewalLocked()
			// While the renewal is in flight, the deadline is what counts.
			l.schedRenewal = false
			k.sched.update(l, k.at(h.DeadlineLocked()))
			if k.pending == nil {
				k.pending = batchPool.Get().([]*Entry)
			}
			if len(k.pending) == 0 {
				k.pendingAt = e.at
			}
			k.pending = append(k.pending, l)
			renewing++
			if len(k.pending) == MaxRenewBatch {
				k.enqueueLocked()
			}
		default:
			// Its lease changed since it was scheduled (a Refresh).
			at, renewal := k.nextEventLocked(l)
			l.schedRenewal = renewal
			k.sched.update(l, at)
		}
		h.Unlock()
	}
	if !more && len(k.pending) > 0 {
		k.enqueueLocked()
	}
	k.wakeAt = nowAt + int64(keeperMaxSleep)
	if k.sched.len() > 0 {
		k.wakeAt = min(k.wakeAt, k.sched.top().at)
	}
	next = k.timeAt(k.wakeAt)
	k.mu.Unlock()

	for _, h := range expired {
		h.Expire()
	}
	return next, more
}

// enqueueLocked hands the batch being gathered to the workers. k.mu must be
// held.
func (k *Keeper) enqueueLocked() {
	k.queue = append(k.queue, renewBatch{locks: k.pending, dueAt: k.pendingAt})
	k.pending = nil
	k.spawnLocked()
}

// spawnLocked sets another worker to the queued batches when they need
// one: when no worker is at work (neither idle nor counted as stalled), or
// when the first queued batch has come due (a lock of it is due for
// renewal) while every worker at work is sending, up to MaxRenewWorkers.
// Batches of locks taken early wait for the worker at work: they go one at
// a time. It wakes an idle worker if there is one, or starts one. k.mu
// must be held.
func (k *Keeper) spawnLocked() {
	atWork := k.workers - k.stalled - k.idle
	starting := k.workers - k.idle - k.sending // at work, about to take a batch
	switch {
	case len(k.queue) == 0 || starting > 0:
	case atWork > 0 && (atWork >= MaxRenewWorkers || k.queue[0].dueAt > k.at(time.Now())):
	case k.idle > 0:
		k.idle--
		k.work <- struct{}{} // never blocks: one per idle worker, fewer than its capacity
	case k.workers < maxStalledWorkers:
		k.workers++
		k.wg.Add(1)
		go k.worker()
	}
}

// worker sends the queued batches, one at a time. With none left it waits
// up to workerLinger for more (spawnLocked), then ends; it ends at once
// when more workers than MaxRenewWorkers are sending, after a stall ended.
func (k *Keeper) worker() {
	defer k.wg.Done()
	linger := time.NewTimer(workerLinger)
	defer linger.Stop()
	for {
		k.mu.Lock()
		if k.workers-k.stalled > MaxRenewWorkers {
			k.workers--
			k.mu.Unlock()
			return
		}
		if len(k.queue) == 0 {
			k.queue = nil
			k.idle++
			k.mu.Unlock()
			linger.Reset(workerLinger)
			select {
			case <-k.work: // claimed by spawnLocked
				continue
			case <-linger.C:
			case <-k.quit:
			}
			k.mu.Lock()
			select {
			case <-k.work: // claimed meanwhile (by spawnLocked, under k.mu)
				k.mu.Unlock()
				continue
			default:
			}
			k.idle--
			k.workers--
			k.mu.Unlock()
			return
		}
		batch := k.queue[0]
		k.queue[0] = renewBatch{}
		k.queue = k.queue[1:]
		k.sending++
		k.spawnLocked() // a due batch behind this one may need another worker
		k.mu.Unlock()
		k.renewBatch(batch.locks)
		k.mu.Lock()
		k.sending--
		k.mu.Unlock()
		clear(batch.locks)
		//lint:ignore SA6002 one small allocation per batch, not per lock; a *[]*Entry kept through the batch costs more code than it saves
		batchPool.Put(batch.locks[:0])
	}
}

// send makes the backend call of a batch whose timeout is timeout. If it
// goes unanswered for a quarter of that, the worker counts as stalled
// meanwhile, and another may start.
func (k *Keeper) send(ctx context.Context, reqs []driver.RenewRequest, timeout time.Duration) ([]driver.RenewResult, error) {
	var fired, done bool // guarded by k.mu
	stall := time.AfterFunc(max(timeout/4, minRenewStall), func() {
		k.mu.Lock()
		if !done {
			fired = true
			k.stalled++
			k.spawnLocked()
		}
		k.mu.Unlock()
	})
	results, err := k.renew(ctx, reqs)
	stall.Stop()
	k.mu.Lock()
	done = true
	if fired {
		k.stalled--
	}
	k.mu.Unlock()
	return results, err
}

// renew sends one renewal batch and applies the results. Locks that ended,
// or whose deadline passed, while the batch waited for a worker are left
// out (the loop declares the latter lost). The request is bounded by half
// the shortest renewal interval of the batch, so that a server that does not
// answer leaves time for a retry before the deadline, and by the latest
// deadline of the batch, after which no reply is of use.
func (k *Keeper) renewBatch(batch []*Entry) {
	sent := time.Now()
	stopping := k.ctx.Err() != nil
	sending := batch[:0] // in place: batch is the keeper's own
	reqs := make([]driver.RenewRequest, 0, len(batch))
	latest := sent
	timeout := driver.MaxTTL
	for _, l := range batch {
		h := l.h
		h.Lock()
		deadline := h.DeadlineLocked()
		if stopping || h.EndedLocked() || !sent.Before(deadline) {
			h.EndRenewalTurnLocked()
			h.Unlock()
			continue
		}
		reqs = append(reqs, h.RenewRequestLocked())
		if deadline.After(latest) {
			latest = deadline
		}
		timeout = min(timeout, RenewTimeout(l.interval))
		h.Unlock()
		sending = append(sending, l)
	}
	if len(sending) == 0 {
		return
	}
	end := sent.Add(timeout)
	if latest.Before(end) {
		end = latest
	}
	ctx, cancel := context.WithDeadline(k.ctx, end)
	results, err := k.send(ctx, reqs, timeout)
	cancel()
	if err == nil && len(results) != len(reqs) {
		err = fmt.Errorf("backend returned %d results for %d renewals", len(results), len(reqs))
	}
	k.done(sent, results, err, len(sending))
	for i, l := range sending {
		res := driver.RenewResult{Err: err}
		if err == nil {
			res = results[i]
		}
		l.h.FinishRenewal(sent, reqs[i].TTL, res)
	}
	// Back on the schedule at their next renewal, a bounded number per hold
	// of k.mu.
	for chunk := range slices.Chunk(sending, keeperChunk) {
		poke := false
		k.mu.Lock()
		for _, l := range chunk {
			poke = k.rescheduleLocked(l) || poke
		}
		k.mu.Unlock()
		if poke {
			k.poke()
		}
	}
}
