package memorybackend

import (
	"context"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Fault is a failure of the calls of some operations, for Inject. Its
// fields combine, in the order a request travels:
//
//  1. Refuse: the request never reaches the store. The call fails with
//     ErrRefused after RequestDelay (at once without one): a refused
//     connection, or with a delay, a partition that drops packets until
//     the client times out. Nothing is applied, ever.
//  2. RequestDelay: the request is in flight to the store for this long,
//     then applied (or queued, while paused). A caller whose ctx ends
//     first gets ctx.Err() at once, but the request is still applied when
//     the delay ends: it was on the wire. A goroutine of the backend
//     applies it; Close waits for it.
//  3. ReplyDelay: once applied, the reply takes this long to come back. A
//     caller whose ctx ends first gets ctx.Err() at once; the request was
//     applied.
//  4. LoseReply: the request is applied, and the call fails with
//     ErrReplyLost once the reply would have arrived (after ReplyDelay).
//
// A Fault with only Ops and Times set does nothing to the calls it matches
// but still uses up Times: it can shield calls from an older fault.
type Fault struct {
	// Ops are the operations whose calls this fault hits. Required.
	Ops Op
	// Times is how many calls the fault hits before it goes away by
	// itself; 0 means every call until cleared.
	Times int

	Refuse       bool          // the request is not applied: ErrRefused
	RequestDelay time.Duration // time in flight before the store applies the request
	ReplyDelay   time.Duration // time the reply takes after the request was applied
	LoseReply    bool          // the request is applied, the reply lost: ErrReplyLost
}

// faultEntry is an injected fault and the calls it may still hit.
type faultEntry struct {
	Fault
	left    int   // calls left when Times > 0
	mistake error // a mistaken Fault: every call fails with it
}

// Inject makes f hit the next calls of f.Ops (f.Times of them, or all
// until cleared). A call is matched when it is made, before any delay: it
// gets the newest injected fault that matches its operation, and only that
// one, which uses up one of its Times. clear removes the fault at once
// (calls that already matched it keep it); it is safe to call more than
// once, and after the fault went away by itself.
//
// A Fault that can only be a mistake (no Ops or unknown ones, a negative
// Times or delay, both Refuse and LoseReply) makes every call fail, until
// cleared, with an InvalidArgumentError that names the bad field, so the
// test that injected it learns why at its first call.
func (b *Backend) Inject(f Fault) (clear func()) {
	if err := f.mistake(); err != nil {
		f = Fault{Ops: AllOps}
		e := &faultEntry{Fault: f, mistake: err}
		return b.addFault(e)
	}
	return b.addFault(&faultEntry{Fault: f, left: f.Times})
}

// mistake returns the error of a Fault that can only be a mistake, or nil.
func (f Fault) mistake() error {
	bad := func(field string, value any, reason string) error {
		return &driver.InvalidArgumentError{Name: "memorybackend.Fault." + field, Value: value, Reason: reason}
	}
	switch {
	case f.Ops == 0 || f.Ops&^AllOps != 0:
		return bad("Ops", f.Ops, "must name operations (Acquire, Release, Renew, TTL)")
	case f.Times < 0:
		return bad("Times", f.Times, "must not be negative")
	case f.RequestDelay < 0:
		return bad("RequestDelay", f.RequestDelay, "must not be negative")
	case f.ReplyDelay < 0:
		return bad("ReplyDelay", f.ReplyDelay, "must not be negative")
	case f.Refuse && f.LoseReply:
		return bad("Refuse and LoseReply", true, "a request cannot be both refused and applied")
	}
	return nil
}

// addFault adds e, newest first, and returns what removes it.
func (b *Backend) addFault(e *faultEntry) (clear func()) {
	b.mu.Lock()
	b.faults = append(b.faults, e)
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.removeFaultLocked(e)
	}
}

func (b *Backend) removeFaultLocked(e *faultEntry) {
	for i, f := range b.faults {
		if f == e {
			b.faults = append(b.faults[:i:i], b.faults[i+1:]...)
			return
		}
	}
}

// takeFaultLocked returns the fault for a call of op, using up one of its
// Times. b.mu must be held.
func (b *Backend) takeFaultLocked(op Op) (Fault, error) {
	for i := len(b.faults) - 1; i >= 0; i-- {
		e := b.faults[i]
		if e.Ops&op == 0 {
			continue
		}
		if e.Times > 0 {
			if e.left--; e.left == 0 {
				b.removeFaultLocked(e)
			}
		}
		return e.Fault, e.mistake
	}
	return Fault{}, nil
}

// Pause stops the store, as SIGSTOP stops a server: from now on every
// request that reaches it waits, unapplied. A caller waiting on one returns
// ctx.Err() when its ctx ends (or ErrClosed on Close), but its request
// stays queued. resume restarts the store: the queued requests are applied
// at once, in the order they arrived, also those whose callers gave up; the
// callers still waiting then get their replies. Pauses nest: the store
// runs again once every Pause is resumed. resume is safe to call more than
// once. Faults still apply: a refused request does not wait, and a delayed
// one waits once it arrives.
func (b *Backend) Pause() (resume func()) {
	b.mu.Lock()
	b.paused++
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			now := time.Now()
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.paused--; b.paused > 0 {
				return
			}
			for _, r := range b.queue {
				b.applyLocked(r, now)
			}
			b.queue = nil
		})
	}
}

// Calls counts the calls of some operations, for assertions.
type Calls struct {
	// Attempted counts the requests sent: every call that passed argument
	// checks with a live ctx before Close, including refused ones.
	Attempted int
	// Applied counts the requests the store applied, including those
	// applied after their callers gave up and those whose reply was lost.
	Applied int
}

// Calls returns the calls of ops made so far, summed over the operations
// in ops (AllOps for every call).
func (b *Backend) Calls(ops Op) Calls {
	b.mu.Lock()
	defer b.mu.Unlock()
	var c Calls
	for _, op := range []Op{Acquire, Release, Renew, TTL} {
		if ops&op != 0 {
			c.Attempted += b.counts[opIndex(op)].Attempted
			c.Applied += b.counts[opIndex(op)].Applied
		}
	}
	return c
}

// request is one request on its way to the store.
type request struct {
	op    Op
	apply func(now time.Time) // run under b.mu; records the result
	done  chan struct{}       // closed once applied
}

// applyLocked applies r at now. b.mu must be held.
func (b *Backend) applyLocked(r *request, now time.Time) {
	r.apply(now)
	b.counts[opIndex(r.op)].Applied++
	close(r.done)
}

// deliver is r's arrival at the store: applied at once, or queued while
// paused.
func (b *Backend) deliver(r *request) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.paused > 0 {
		b.queue = append(b.queue, r)
		return
	}
	b.applyLocked(r, now)
}

// do makes one call of op: apply is the request, run under b.mu at the
// store's time when the request arrives. It returns apply's result, or the
// error of the call's fault, ctx or Close.
func do[T any](b *Backend, ctx context.Context, op Op, apply func(now time.Time) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err // no request sent
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return zero, ErrClosed
	}
	// Added under b.mu while not closed, so before Close's Wait; the
	// goroutine below is added while this call is still counted.
	b.calls.Add(1)
	defer b.calls.Done()
	b.counts[opIndex(op)].Attempted++
	f, mistake := b.takeFaultLocked(op)
	b.mu.Unlock()
	if mistake != nil {
		return zero, mistake
	}

	var (
		val T
		err error
	)
	r := &request{op: op, done: make(chan struct{})}
	r.apply = func(now time.Time) { val, err = apply(now) }

	if f.RequestDelay > 0 {
		arrival := time.Now().Add(f.RequestDelay)
		if werr := b.sleep(ctx, f.RequestDelay); werr != nil {
			if !f.Refuse {
				b.calls.Go(func() {
					time.Sleep(time.Until(arrival))
					b.deliver(r) // still on the wire: applied when it lands
				})
			}
			return zero, werr
		}
	}
	if f.Refuse {
		return zero, ErrRefused
	}

	b.deliver(r)
	select {
	case <-r.done:
	default: // paused
		select {
		case <-r.done:
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-b.closing:
			return zero, ErrClosed
		}
	}
	// Applied: val and err are set (r.done was closed after apply).
	if werr := b.sleep(ctx, f.ReplyDelay); werr != nil {
		return zero, werr
	}
	if f.LoseReply {
		return zero, ErrReplyLost
	}
	return val, err
}

// sleep waits d, or until ctx ends (ctx.Err()) or Close (ErrClosed).
func (b *Backend) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.closing:
		return ErrClosed
	}
}
