package fencelock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/waitq"
)

// minRetryDelay is the shortest fallback timer between attempts.
const minRetryDelay = time.Millisecond

// errWaitElapsed is the cancel cause of a wait that WithWait ended.
var errWaitElapsed = errors.New("fencelock: wait elapsed")

// A waiter is one Acquire (or TryAcquire) call: it makes an attempt whenever
// the lock may have become free, and sleeps in between. It wakes on
//   - a release notification from the backend (watch),
//   - a release by another goroutine of this Client (its place in the
//     Client's line for the key, internal/waitq), which may hand it the lock
//     (driver.Lines.HandOff, release.go),
//   - the fallback timer: the retry strategy's backoff, cut short at the
//     holder's remaining lease,
//   - the end of the wait: the caller's context, WithWait, Close, too
//     many consecutive failures, or the backend refusing the client
//     (ErrMisconfigured), which no retry can change.
//
// All attempts use one token, so an attempt whose reply was lost is
// completed by the next one instead of leaving a hold behind.
type waiter struct {
	c      *Client
	req    driver.Request
	cfg    acquireConfig
	parent context.Context // the caller's context
	hctx   context.Context // the context of the call's hooks (Hooks.AcquireStart)
	ctx    context.Context // parent, bounded by WithWait and Close
	start  time.Time

	cancel     context.CancelCauseFunc // ends ctx (Close: with ErrClosed)
	cancelWait context.CancelFunc      // stops WithWait's timer; nil without one

	waitStart time.Time // when the call began to wait, for Hooks; zero until then, or without hooks

	place *waitq.Place  // this call's place in the Client's line for the key; nil until it lines up
	watch *driver.Watch // release notifications; nil until contended, or without a notifier
	timer *time.Timer

	attempts    int           // attempts sent
	rounds      int           // fallback timer rounds, for the backoff
	failures    int           // consecutive failed attempts
	maxFailures int           // failures that end the wait; 0: no limit
	holderTTL   time.Duration // the holder's remaining lease at the last answer
	lastErr     error         // the last backend error
	contended   bool          // the last attempt that finished found the lock held
	refused     error         // the backend refused the client (ErrMisconfigured): the call ends with it
	ambiguous   bool          // an attempt may have left a hold on the server
	watchFailed bool          // the notifier refused: poll

	// sentAt holds when the latest attempts were sent, by attempt number
	// modulo its length, for grants (driver.Turn.Grant), which count their
	// lease from the attempt they name; nil but for fair waiters, which alone get grants.
	sentAt []time.Time
}

// acquireWaiting runs a waiter until it holds the lock or gives up. hctx is
// the context of the call's hooks, from acquireStart.
func (c *Client) acquireWaiting(parent, hctx context.Context, req driver.Request, cfg acquireConfig) (lk *Lock, err error) {
	req.Notify = cfg.notify
	w := c.newWaiter(parent, req, cfg)
	w.hctx = hctx
	defer func() {
		w.stop(lk != nil)
		w.acquireDone(lk, err)
	}()
	if parent.Err() != nil {
		// The caller has given up already: no attempt, no line, no watch.
		return nil, w.giveUp()
	}

	if w.linesUp() && (c.queues.Waiting(req.Key) || c.queues.Holding(req.Key)) {
		// Goroutines already waiting go first; and while this Client
		// holds the lock, there is nothing to attempt: its release
		// wakes the line, or hands the lock over (release.go).
		w.place = c.queues.Join(req.Key, req)
	}
	if w.place == nil && !w.singleAttempt() && c.queues.IsWatched(w.watched()) {
		// Another call of this Client waits for the key, watching it:
		// this one will most likely wait too, and the backend delivers
		// the key's notifications already, so watching costs no round
		// trip. Watching before the first attempt spares the second one
		// that a watch begun after it needs (a release in between would
		// go unnoticed): a fair waiter that joins a busy line makes one
		// attempt, not two.
		w.subscribe()
	}
	for {
		heldByPredecessor, ok := w.awaitTurn()
		if !ok {
			break
		}
		if lk := w.handedOver(); lk != nil {
			return lk, nil
		}
		if !heldByPredecessor && !w.heldHere() {
			lk, err := w.attempt()
			if lk != nil || err != nil {
				return lk, err
			}
			if w.over() {
				break
			}
			if errors.Is(w.lastErr, errReplyTooLate) && w.failures > 0 {
				// The server answered, too late: the hold it granted to
				// our token is likely still running. Complete it now,
				// before it lapses, rather than after a backoff.
				continue
			}
			if w.place == nil && !cfg.fair && cfg.kind == KindLock { // a fair waiter's line is the server's
				w.place = c.queues.Join(req.Key, w.req)
				if w.place.TurnTaken = w.place.IsHead(); !w.place.TurnTaken {
					continue // wait for our turn, then attempt
				}
			}
			// A release between the attempt and the subscription would
			// go unnoticed: attempt once more after subscribing. (After a
			// failure, there is nothing to be woken for: back off.)
			if w.contended && w.subscribe() {
				continue
			}
		} else {
			w.subscribe()
			drain(w.releases()) // releases before our predecessor's hold
		}
		if !w.sleep() {
			break
		}
	}
	return nil, w.giveUp()
}

// newWaiter bounds the wait by parent, WithWait and Close (c.onClose). The
// caller must call stop when the wait ends.
func (c *Client) newWaiter(parent context.Context, req driver.Request, cfg acquireConfig) *waiter {
	w := &waiter{c: c, req: req, cfg: cfg, parent: parent, start: time.Now()}
	w.ctx, w.cancel = context.WithCancelCause(parent)
	c.onClose.add(w, w.cancel)
	if cfg.waitSet && cfg.wait > 0 {
		w.ctx, w.cancelWait = context.WithTimeoutCause(w.ctx, cfg.wait, errWaitElapsed)
	}
	if cfg.fair {
		w.sentAt = make([]time.Time, 16)
	}
	w.maxFailures = cfg.maxFailures
	if !cfg.maxFailuresSet && !w.hasDeadline() {
		w.maxFailures = defaultMaxFailures
	}
	return w
}

// stop releases what the waiter holds; acquired says it leaves with the
// lock.
func (w *waiter) stop(acquired bool) {
	c := w.c
	if w.watch != nil {
		w.watch.Stop()
		c.queues.WatchStopped(w.watched())
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.place != nil {
		c.queues.Leave(w.req.Key, w.place, acquired)
	}
	if w.cancelWait != nil {
		w.cancelWait()
	}
	c.onClose.remove(w)
	w.cancel(nil)
}

// singleAttempt reports whether the call makes one attempt only
// (TryAcquire, WithWait(0)).
func (w *waiter) singleAttempt() bool { return w.cfg.waitSet && w.cfg.wait == 0 }

// hasDeadline reports whether something other than failures bounds the wait.
func (w *waiter) hasDeadline() bool {
	_, ok := w.parent.Deadline()
	return ok || w.cfg.waitSet
}

// linesUp reports whether the call waits in the Client's line for its key. A
// re-entrant owner never waits behind others (it may hold the lock), and a
// single attempt does not wait at all.
func (w *waiter) linesUp() bool {
	_, reentrant := ownerFromContext(w.parent)
	return !reentrant && !w.singleAttempt() && !w.cfg.fair && w.cfg.kind == KindLock
}

// awaitTurn waits until the call is at the head of its line (at once when it
// is not in one). heldByPredecessor reports that the goroutine before it
// took the lock: then there is nothing to try until that one releases
// (which wakes this one through its place) or its lease ends. ok is false
// when the wait ended.
func (w *waiter) awaitTurn() (heldByPredecessor, ok bool) {
	if w.place == nil || w.place.TurnTaken {
		return false, true
	}
	w.beginWait()
	select {
	case <-w.place.Turn:
	case <-w.ctx.Done():
		return false, false
	}
	w.place.TurnTaken = true
	return w.place.AfterAcquire, true
}

// attempt makes one attempt. It returns the lock when acquired, an error
// that ends the call at once (invalid arguments), or neither.
func (w *waiter) attempt() (*Lock, error) {
	// This attempt covers every release notified so far.
	drain(w.releases())
	if w.place != nil {
		drain(w.place.Wake)
	}
	if lk := w.granted(); lk != nil {
		return lk, nil
	}
	if lk := w.handedOver(); lk != nil {
		return lk, nil
	}
	if w.ctx.Err() != nil {
		return nil, nil // ended before this attempt was sent: nothing to clean up
	}
	w.attempts++
	if w.sentAt != nil {
		w.sentAt[w.attempts%len(w.sentAt)] = now()
	}
	lk, res, err := w.c.attempt(w.ctx, w.req, w.cfg, w.ambiguous, int64(w.attempts))
	switch {
	case lk != nil:
		return lk, nil
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrUnsupported):
		return nil, lockError("acquire", w.req.Key, err) // the store refused the names, or the request
	case asTickClaimed(err) != nil:
		// A RunJob attempt whose tick was claimed: there is nothing to
		// wait for. An earlier attempt whose reply was lost took nothing
		// (it would be a retry now), but a copy of it may still be on its
		// way: have the backend refuse it.
		if w.ambiguous {
			w.c.releaser.add(driver.ReleaseRequest{Ref: w.req.Ref, Tombstone: tombstoneLife}, w.req.TTL)
		}
		return nil, err
	case err != nil:
		// Not sent: nothing on the server. Not replicated: the backend
		// released what it had taken. Anything else may have left a hold.
		if !errors.Is(err, ErrNotSent) && !errors.Is(err, ErrNotReplicated) {
			w.ambiguous = true
		}
		if errors.Is(err, ErrMisconfigured) {
			// The store refused the client itself: no later attempt
			// can succeed.
			w.refused = err
			return nil, nil
		}
		if w.ctx.Err() != nil || w.deadlinePassed() {
			return nil, nil // cut short by the end of the wait: not a failure of its own
		}
		w.failures++
		w.lastErr = err
		w.contended = false
		w.holderTTL = 0
	default:
		w.failures = 0
		w.contended = true
		w.holderTTL = res.HolderTTL
	}
	return nil, nil
}

// deadlinePassed reports whether the wait's deadline has passed, though its
// context may not say so yet: go-redis sets a connection's deadline from
// the same time, and on a busy machine its i/o timeout can end a request
// before the context's timer has run.
func (w *waiter) deadlinePassed() bool {
	d, ok := w.ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// granted returns the Lock a release handed to this fair waiter (a grant,
// driver.Turn.Grant), or nil when there is none or it cannot be used: the
// attempt it names is too old to remember, or its lease has passed locally.
// The next attempt then completes the grant as a retry if the store still
// has it.
func (w *waiter) granted() *Lock {
	g, ok := w.watch.TakeGrant()
	if !ok {
		return nil
	}
	n := int64(w.attempts)
	if g.Seq <= 0 || g.Seq > n || g.Seq <= n-int64(len(w.sentAt)) {
		return nil
	}
	// The store handled attempt g.Seq before it made the grant, so the
	// grant's lease began after that attempt was sent.
	sent := w.sentAt[g.Seq%int64(len(w.sentAt))]
	res := driver.Result{Acquired: true, Fence: g.Fence, Holds: 1}
	lease := fairGrantLease(w.req.TTL)
	if lease < w.req.TTL {
		res.Validity = lease
	}
	if !now().Before(w.c.grantedEnd(sent, w.req.TTL, res.Validity)) {
		return nil
	}
	lk, err := w.c.hold(w.req, w.cfg, res, sent, w.ambiguous)
	if err != nil {
		// Closing: the hold stays on the store; giving up releases it.
		w.ambiguous = true
		return nil
	}
	if res.Validity > 0 {
		w.c.completeGrant(lk, w.req.TTL)
	}
	return lk
}

// heldHere reports whether the call waits in its Client's line while the
// Client holds the lock: an attempt would be refused, and would mark the
// lock as waited for, so that its release would wake waiters instead of
// handing the lock to this one. The lock's end wakes the head of the line.
// A re-entrant waiter (WithOwner) is never held back: the hold may be its
// owner's, which it re-enters at once (and no hand-off serves it anyway).
func (w *waiter) heldHere() bool {
	return w.place != nil && !w.place.Reentrant() && w.c.queues.Holding(w.req.Key)
}

// over reports whether the last attempt ends the call.
func (w *waiter) over() bool {
	return w.ctx.Err() != nil || w.singleAttempt() || w.refused != nil ||
		(w.maxFailures > 0 && w.failures >= w.maxFailures)
}

// subscribe starts watching for releases, the first time the lock is found
// held. It reports whether it did so just now.
func (w *waiter) subscribe() bool {
	var watch *driver.Watch
	var err error
	switch {
	case w.watch != nil || w.watchFailed:
		return false
	case w.c.notify == nil:
		return false
	default:
		req := driver.WatchRequest{Ref: driver.Ref{Kind: w.req.Kind, Namespace: w.req.Namespace, Key: w.req.Key}}
		if w.cfg.fair {
			req.Token = w.req.Token // the waiter's turn in the store's line
		}
		watch, err = w.c.notify.Watch(w.ctx, req)
	}
	if err != nil {
		w.watchFailed = true
		if errors.Is(err, ErrUnsupported) {
			return false // nothing to watch this with: poll
		}
		if errors.Is(err, ErrMisconfigured) {
			w.refused = err // the store refused the subscription: sleep ends the call
			return false
		}
		w.c.log.Debug("fencelock: release notifications unavailable; polling", "key", w.req.Key, "error", err)
		return false
	}
	w.watch = watch
	w.c.queues.WatchStarted(w.watched())
	return true
}

// watched is what the call watches (subscribe).
func (w *waiter) watched() waitq.Watched {
	return waitq.Watched{Key: w.req.Key, Kind: w.cfg.kind, Fair: w.cfg.fair}
}

// releases is the channel of release notifications, or nil (never ready)
// without a watch.
func (w *waiter) releases() <-chan struct{} {
	if w.watch == nil {
		return nil
	}
	return w.watch.C
}

// sleep waits for a wake-up: a release, the fallback timer, or the end of
// the wait. It reports whether the wait goes on.
func (w *waiter) sleep() bool {
	if w.refused != nil {
		return false
	}
	w.rounds++
	// At least a millisecond: a strategy returning zero or less must not
	// turn waiting into a busy loop.
	delay := max(w.cfg.retry.Backoff(w.rounds), minRetryDelay)
	if w.cfg.fair && w.watch != nil && w.failures == 0 {
		// The fair line's store tells each waiter when its turn comes (a
		// grant or a wake-up, to it alone), and the notifier wakes every
		// watch when its connection was lost. An attempt before then only
		// renews the place, at the cost of a script run: 5 attempts per
		// hand-off with 16 waiters. So wait until the place needs
		// renewing, or the holder's lease or the place ahead ends (below).
		delay = fairRenewPlace
	}
	if w.holderTTL > 0 && w.holderTTL < delay {
		delay = w.holderTTL
	}
	if w.cfg.fair {
		delay = min(delay, fairRenewPlace) // keep the place in line
	}
	if w.cfg.keepAlive > 0 {
		delay = min(delay, w.cfg.keepAlive) // keep what the attempts renew (a writer's intent)
	}
	if w.timer == nil {
		w.timer = time.NewTimer(delay)
	} else {
		w.timer.Reset(delay)
	}
	var ownReleases <-chan struct{}
	if w.place != nil {
		ownReleases = w.place.Wake
	}
	w.beginWait()
	select {
	case <-w.ctx.Done():
	case <-w.timer.C:
	case <-w.releases():
	case <-ownReleases:
	}
	return w.ctx.Err() == nil
}

// giveUp cleans up after the attempts and says why the call failed: the
// lock was held by someone else (NotAcquiredError), the backend could not
// be reached (UnavailableError), or it refused the client (ErrMisconfigured).
func (w *waiter) giveUp() error {
	if w.place != nil && w.c.queues.Withdraw(w.place) {
		// A release of this Client may have handed us the lock.
		w.ambiguous = true
	}
	switch {
	case w.ambiguous:
		// An attempt may have taken the lock although no reply said so:
		// release it, and have the backend refuse a copy still on its way.
		// (The release also takes a fair waiter out of the line.)
		w.c.releaser.add(driver.ReleaseRequest{Ref: w.req.Ref, Tombstone: tombstoneLife}, w.req.TTL)
	case w.cfg.fair && w.attempts > 0 && !w.singleAttempt():
		// Leave the line at once, rather than hold it up until the
		// place lapses.
		w.c.releaser.add(driver.ReleaseRequest{Ref: w.req.Ref}, driver.PlaceLease)
	case w.cfg.keepAlive > 0 && w.attempts > 0 && !w.singleAttempt():
		// Withdraw what the attempts registered (a writer's intent),
		// rather than hold others up until it lapses.
		w.c.releaser.add(driver.ReleaseRequest{Ref: w.req.Ref}, 3*w.cfg.keepAlive)
	}
	if w.refused != nil {
		// The clean-up above is tried all the same: a refusal of the
		// release notifications (channels) need not refuse a release.
		return lockError("acquire", w.req.Key, w.refused)
	}
	// The caller's context ended the call, unless it is AcquireAll's
	// bound of WithWait for all its keys (which is WithWait's elapsing).
	callerEnded := w.parent.Err() != nil && !errors.Is(context.Cause(w.parent), errWaitElapsed)
	var cause error
	switch {
	case callerEnded:
		cause = ctxErr(w.parent)
	case w.parent.Err() != nil:
		cause = w.parent.Err()
	case w.c.closed():
		cause = ErrClosed
	}
	heldHere := w.heldHere()
	switch {
	// The lock was seen held: the last attempt found it so, or another
	// call of this Client holds it. Not replicated is not an outage
	// either: the server answered, and the lock could not be had on its
	// terms.
	case cause == ErrClosed || w.contended || heldHere || errors.Is(w.lastErr, ErrNotReplicated) ||
		(w.attempts == 0 && !callerEnded): // WithWait elapsed while the call waited for its turn in line
		return &NotAcquiredError{
			Key:       w.req.Key,
			Attempts:  w.attempts,
			Waited:    time.Since(w.start),
			HolderTTL: w.holderTTL,
			HeldHere:  heldHere,
			Cause:     cause,
			LastErr:   w.lastErr,
		}
	case w.attempts == 0:
		// The caller gave up before anything was learnt about the lock:
		// its own error alone, neither "busy" nor "unavailable".
		return lockError("acquire", w.req.Key, cause)
	}
	lastErr := w.lastErr
	if lastErr == nil {
		// The only attempts were cut short by the end of the wait.
		lastErr = errors.New("no reply before the wait ended")
		if errors.Is(context.Cause(w.ctx), errWaitElapsed) {
			lastErr = errors.New("no reply within the wait of " + w.cfg.wait.String())
		}
	}
	return &UnavailableError{
		Op:       "acquire",
		Key:      w.req.Key,
		Attempts: w.attempts,
		Waited:   time.Since(w.start),
		Cause:    cause,
		Err:      lastErr,
	}
}

// drain empties a wake-up channel without blocking.
func drain(c <-chan struct{}) {
	select {
	case <-c:
	default:
	}
}

// acquireDone reports the end of a waiter's call: lk, or err.
func (w *waiter) acquireDone(lk *Lock, err error) {
	if w.waitStart != (time.Time{}) {
		if h := w.c.hooks.WaitDone; h != nil {
			h(w.hctx, WaitEvent{Key: w.req.Key, Kind: w.cfg.kind, Waited: time.Since(w.waitStart)})
		}
	}
	h := w.c.hooks.AcquireDone
	if h == nil {
		return
	}
	ev := AcquireEvent{Key: w.req.Key, Kind: w.cfg.kind, Outcome: outcomeOf(err),
		Wait: time.Since(w.start), Attempts: w.attempts, Err: err}
	if lk != nil {
		ev.Fence = lk.fence
	}
	h(w.hctx, ev)
}

// beginWait notes that the waiter is about to block, the first time it is.
func (w *waiter) beginWait() {
	if w.waitStart != (time.Time{}) || (w.c.hooks.WaitStart == nil && w.c.hooks.WaitDone == nil) {
		return
	}
	w.waitStart = time.Now()
	if h := w.c.hooks.WaitStart; h != nil {
		h(w.hctx, WaitEvent{Key: w.req.Key, Kind: w.cfg.kind})
	}
}

// closeSet holds the cancel functions of the calls in progress that Close
// ends at once (waits, and the contexts Do and RunJob give fn), each under
// a key of its own (a pointer). A context.AfterFunc on the Client's
// closeCtx per call would do the same at three allocations a call; an entry
// here costs none once the map has grown.
type closeSet struct {
	mu      sync.Mutex
	cancels map[any]context.CancelCauseFunc
	closed  bool
}

// add registers cancel under key, or calls it with ErrClosed at once after
// close.
func (s *closeSet) add(key any, cancel context.CancelCauseFunc) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel(ErrClosed)
		return
	}
	if s.cancels == nil {
		s.cancels = make(map[any]context.CancelCauseFunc)
	}
	s.cancels[key] = cancel
	s.mu.Unlock()
}

// remove forgets the cancel function under key.
func (s *closeSet) remove(key any) {
	s.mu.Lock()
	delete(s.cancels, key)
	s.mu.Unlock()
}

// close calls every registered cancel function with ErrClosed, and those
// added later.
func (s *closeSet) close() {
	s.mu.Lock()
	s.closed = true
	cancels := s.cancels
	s.cancels = nil
	s.mu.Unlock()
	for _, cancel := range cancels {
		cancel(ErrClosed)
	}
}
