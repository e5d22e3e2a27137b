package fencelock

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Hooks are functions a Client calls as things happen to its locks, for
// metrics, tracing or logging (the fencelockprom and fencelockotel modules
// turn them into Prometheus metrics and OpenTelemetry spans and metrics). Pass them to New with WithHooks. A nil field is
// skipped; a Client without hooks only checks that they are nil.
//
// Each acquired Lock ends with exactly one Released or Lost call, so that
// AcquireDone (with OutcomeAcquired) minus Released minus Lost is the number
// of locks the Client holds. Every AcquireStart (WaitStart) is followed by
// one AcquireDone (WaitDone).
//
// The Client calls hooks synchronously, on the goroutine where the event
// happens (the caller of Acquire or Release, the lease keeper's): a hook
// must be quick and must not block, and it must not call the Client or its
// Locks. A hook that needs more (a network call) should hand the event to a
// goroutine of its own. Hooks may be called concurrently.
//
// The hooks of events that happen in a call (an acquire, its wait, a
// release, a forced release) get the call's context, so that a tracing
// hook can attach a span or an event to the caller's trace; the others
// happen in the Client's own goroutines.
type Hooks struct {
	// AcquireStart is called when an acquire call that AcquireDone reports
	// begins, with the call's context and only Key and Kind set. As with
	// net/http/httptrace, the call's other hooks get the context it returns
	// (nil: ctx), so a tracer can start a span here and end it in
	// AcquireDone. The call itself keeps ctx for its requests.
	AcquireStart func(ctx context.Context, e AcquireEvent) context.Context

	// AcquireDone is called when an acquire call returns: TryAcquire,
	// Acquire and Do, once per key of AcquireAll, the
	// acquires of Semaphore and RWLock, Campaign and RunJob. ctx is the
	// call's (or AcquireStart's). (A call refused as a whole before it
	// tried any key, such as an AcquireAll naming a key twice or a Do
	// without a function, is not reported.)
	AcquireDone func(ctx context.Context, e AcquireEvent)

	// WaitStart is called when an acquire call begins to wait: its first
	// attempt found the lock held (or the backend unreachable), or other
	// goroutines of the Client were already waiting for the key. An
	// uncontended acquire never waits. ctx is the call's (or AcquireStart's).
	WaitStart func(ctx context.Context, e WaitEvent)

	// WaitDone is called when a call that began to wait stops waiting,
	// just before its AcquireDone. ctx is the one WaitStart got.
	WaitDone func(ctx context.Context, e WaitEvent)

	// Released is called when a lock is released: by Release (also when
	// the release is only confirmed later, in the background), by Do, by
	// Close, or at the end of a RunJob run. ctx is the context of the
	// call that released it (Close's own for Close).
	Released func(ctx context.Context, e ReleaseEvent)

	// ForceReleased is called by Client.ForceRelease for each hold it
	// freed, with the call's context and the operator's reason (Held is
	// zero). A *Lock of this Client for the hold is Lost just before.
	ForceReleased func(ctx context.Context, e ReleaseEvent)

	// Lost is called when a lock is lost (its Err matches ErrLost), by the
	// goroutine that found it lost: the lease keeper's, or one that called
	// a method of the Lock. It runs after the Lock's Done is closed, so
	// whoever waits on Done learns of the loss first.
	Lost func(LostEvent)

	// RenewalDone is called when a batch of automatic renewals (one round
	// trip of the lease keeper) has its answer. Refresh is not reported. A
	// batch that Close cancelled, after it released the batch's locks,
	// counts no failures.
	RenewalDone func(RenewalEvent)
}

// Kind is the kind of hold an event is about (see driver.Kind).
type Kind = driver.Kind

// The kinds of hold.
const (
	KindLock      = driver.KindLock      // the plain lock (Client.Acquire, Do, AcquireAll, Campaign, RunJob)
	KindSemaphore = driver.KindSemaphore // a permit of a Semaphore
	KindRead      = driver.KindRead      // a read hold of an RWLock
	KindWrite     = driver.KindWrite     // the write hold of an RWLock
)

// outcomeOf is AcquireEvent.Outcome for the result of an acquire call.
func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "acquired"
	case errors.Is(err, ErrClosed): // first: a wait Close ended is also not acquired
		return "closed"
	case errors.Is(err, ErrNotAcquired):
		return "not_acquired"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrMisconfigured):
		return "misconfigured"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	default:
		return "invalid"
	}
}

// Why a lock can be lost: LostEvent.Reason.
const (
	lostGone     = "gone"
	lostDeadline = "deadline"
	lostMaxHold  = "max_hold"
	lostRefused  = "refused"
)

// AcquireEvent reports the end of an acquire call (Hooks.AcquireDone).
type AcquireEvent struct {
	Key      string // the lock key (a Semaphore's or RWLock's name), without namespace
	Kind     Kind
	Outcome  string        // how the call ended, fit for a metric label: see below
	Wait     time.Duration // from the start of the call to its end, attempts included
	Attempts int           // acquire requests sent (0 when refused before any, or when a release by another goroutine of the Client handed the lock over: see driver.Lines.HandOff)
	Fence    int64         // the Lock's fence when acquired, else 0
	Err      error         // the call's error; nil when acquired
}

// An AcquireEvent's Outcome is one of:
//
//   - "acquired": the call returned a held Lock (Err is nil);
//   - "not_acquired": someone else held the lock (Err matches
//     ErrNotAcquired): TryAcquire found it taken, or the wait ended (the
//     context, WithWait) while it was;
//   - "unavailable": the store could not be reached or did not answer in
//     time (ErrUnavailable);
//   - "misconfigured": the store refused the client's credentials or
//     permissions (ErrMisconfigured);
//   - "closed": the Client was closed before or while the call waited
//     (ErrClosed);
//   - "canceled": the caller's context ended the call before any attempt
//     learnt anything of the lock (Err matches only the context's error);
//   - "invalid": the call was refused: an invalid argument or option
//     (ErrInvalidArgument), a kind of hold the store lacks (ErrUnsupported),
//     a failing token generator.

// WaitEvent reports that an acquire call began or stopped waiting
// (Hooks.WaitStart, Hooks.WaitDone).
type WaitEvent struct {
	Key    string
	Kind   Kind
	Waited time.Duration // WaitDone only: how long the call waited
}

// ReleaseEvent reports a release (Hooks.Released, Hooks.ForceReleased).
type ReleaseEvent struct {
	Key    string
	Kind   Kind
	Fence  int64
	Held   time.Duration // from the sending of the acquiring request to the release; zero in ForceReleased
	Reason string        // ForceReleased only: the reason given to Client.ForceRelease
}

// LostEvent reports the loss of a lock (Hooks.Lost).
type LostEvent struct {
	Key    string
	Kind   Kind
	Fence  int64
	Reason string        // why, fit for a metric label: see below
	Held   time.Duration // from the sending of the acquiring request to the loss
}

// A LostEvent's Reason is one of:
//
//   - "gone": the store no longer had the hold when a renewal, Refresh or
//     Release asked (its lease had ended, or it was deleted or taken over);
//   - "deadline": the local lease deadline passed without a successful
//     renewal (the store was unreachable or slow, or the lock was not
//     renewed);
//   - "max_hold": the lock was held for its WithMaxHold bound;
//   - "refused": a renewal (or Refresh) was refused for the client's
//     configuration (ErrMisconfigured): no later one can succeed, so the
//     holder is told at once rather than at the deadline.

// RenewalEvent reports one batch of automatic renewals, one round trip to
// the backend (Hooks.RenewalDone).
type RenewalEvent struct {
	Locks    int           // renewals sent in the batch
	Failed   int           // of those, how many failed: no answer (the lock stays held until its deadline and is retried), or refused (ErrMisconfigured: the lock is lost)
	Gone     int           // of those, how many found the hold gone (each lock is then lost, reported by Lost)
	Duration time.Duration // from sending the batch to its answer
}

// mergeHooks makes one Hooks of several: each field calls the functions of
// every Hooks that has one, and stays nil when none has, so that an unset
// hook costs a nil check.
func mergeHooks(hs []Hooks) Hooks {
	if len(hs) == 1 {
		return hs[0]
	}
	return Hooks{
		AcquireStart:  chainStart(hs),
		ForceReleased: fanOutCtx(hs, func(h *Hooks) func(context.Context, ReleaseEvent) { return h.ForceReleased }),
		AcquireDone:   fanOutCtx(hs, func(h *Hooks) func(context.Context, AcquireEvent) { return h.AcquireDone }),
		WaitStart:     fanOutCtx(hs, func(h *Hooks) func(context.Context, WaitEvent) { return h.WaitStart }),
		WaitDone:      fanOutCtx(hs, func(h *Hooks) func(context.Context, WaitEvent) { return h.WaitDone }),
		Released:      fanOutCtx(hs, func(h *Hooks) func(context.Context, ReleaseEvent) { return h.Released }),
		Lost:          fanOut(hs, func(h *Hooks) func(LostEvent) { return h.Lost }),
		RenewalDone:   fanOut(hs, func(h *Hooks) func(RenewalEvent) { return h.RenewalDone }),
	}
}

// fanOut is fanOutCtx for the hooks without a context.
func fanOut[E any](hs []Hooks, field func(*Hooks) func(E)) func(E) {
	f := fanOutCtx(hs, func(h *Hooks) func(context.Context, E) {
		if g := field(h); g != nil {
			return func(_ context.Context, e E) { g(e) }
		}
		return nil
	})
	if f == nil {
		return nil
	}
	return func(e E) { f(context.TODO(), e) }
}

// fanOutCtx returns a function calling field of every h in hs that has
// one, or nil when none has.
func fanOutCtx[E any](hs []Hooks, field func(*Hooks) func(context.Context, E)) func(context.Context, E) {
	var fs []func(context.Context, E)
	for i := range hs {
		if f := field(&hs[i]); f != nil {
			fs = append(fs, f)
		}
	}
	switch len(fs) {
	case 0:
		return nil
	case 1:
		return fs[0]
	}
	return func(ctx context.Context, e E) {
		for _, f := range fs {
			f(ctx, e)
		}
	}
}

// chainStart returns an AcquireStart calling those of hs in order, each
// with the context the one before returned; nil when none has one.
func chainStart(hs []Hooks) func(context.Context, AcquireEvent) context.Context {
	var fs []func(context.Context, AcquireEvent) context.Context
	for i := range hs {
		if f := hs[i].AcquireStart; f != nil {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	return func(ctx context.Context, e AcquireEvent) context.Context {
		for _, f := range fs {
			if next := f(ctx, e); next != nil {
				ctx = next
			}
		}
		return ctx
	}
}
