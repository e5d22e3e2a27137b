package fencelock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Sentinel errors. Match them with errors.Is; the errors fencelock returns
// wrap them with the key and the cause.
var (
	// ErrNotAcquired means the lock is held by someone else: TryAcquire found
	// it taken, or Acquire gave up waiting while it was (its error then also
	// matches the reason it gave up, such as context.DeadlineExceeded or
	// ErrClosed). It is never the error of an outage (see ErrUnavailable),
	// nor of a caller whose context ended before any attempt found the lock
	// held: that error matches the context's error alone.
	ErrNotAcquired = errors.New("fencelock: lock not acquired")

	// ErrUnavailable means the backend could not be reached or did not answer
	// in time (connection refused, a timeout, a reply that came after the
	// lease it was for had ended): the call could not learn or change the
	// lock's state. It is distinct from ErrNotAcquired, so that a service
	// can answer "unavailable, retry later" rather than "busy". Every
	// *UnavailableError matches it.
	ErrUnavailable = errors.New("fencelock: backend unavailable")

	// ErrMisconfigured means the backend refused the client itself: its
	// credentials (a wrong password, or none where the store requires one)
	// or its permissions (a user the store's access rules deny a command,
	// key or channel fencelock needs). It is not an outage: retrying cannot
	// help, so nothing retries it. A waiting Acquire returns it on the
	// first such reply, a renewal refused so ends the lock at once (its Err
	// matches ErrLost too), and a release refused so is not retried in the
	// background (the lease lapses on the server). Fix the configuration;
	// Check reports it at start-up.
	ErrMisconfigured = driver.ErrMisconfigured

	// ErrNotReplicated means an acquire or renewal reached the store but too
	// few replicas acknowledged it in time (redisbackend.WithReplicaAck): a
	// failover could lose it, so it does not count. An acquire is released
	// again by the backend; its error also matches ErrNotAcquired. A renewal
	// that is not replicated leaves the lease's local deadline where it was.
	ErrNotReplicated = driver.ErrNotReplicated

	// ErrNotSent is for stores (package driver): wrap it in the error of a
	// request that was certainly not sent (no connection could be made), so
	// that the Client knows it left nothing behind to clean up. Any other
	// error is taken to mean the request may have been applied.
	ErrNotSent = driver.ErrNotSent

	// ErrNotHeld means the server no longer holds the lock for this owner
	// token: it expired, was released, or was taken over.
	ErrNotHeld = driver.ErrNotHeld

	// ErrLost is the Err of a lock whose ownership ended without a Release:
	// renewal found it gone, or its local lease deadline passed without a
	// successful renewal. It is also the cause of the context Do passes to
	// its function once the lock is lost.
	ErrLost = errors.New("fencelock: lock lost")

	// ErrReleased is the Err of a lock that was released by its holder.
	ErrReleased = errors.New("fencelock: lock released")

	// ErrClosed is returned by a Client after Close, and ends waits that
	// were in progress when Close was called.
	ErrClosed = errors.New("fencelock: client closed")

	// ErrInvalidArgument is matched by every *InvalidArgumentError.
	ErrInvalidArgument = driver.ErrInvalidArgument

	// ErrUnsupported means the Client's backend lacks a capability the call
	// needs (such as the line of waiters of WithFairness); the error names
	// it. The package documentation lists which backend supports what.
	ErrUnsupported = driver.ErrUnsupported
)

// InvalidArgumentError reports a bad argument by name and value. It matches
// ErrInvalidArgument.
type InvalidArgumentError = driver.InvalidArgumentError

func invalid(name string, value any, reason string) error {
	return &InvalidArgumentError{Name: name, Value: value, Reason: reason}
}

// NotAcquiredError is returned when a lock could not be had because someone
// else held it. It matches ErrNotAcquired and, through Unwrap, the reason
// Acquire stopped waiting (ctx.Err() and context.Cause, ErrClosed) when
// there is one.
type NotAcquiredError struct {
	Key       string        // the lock key, without namespace
	Attempts  int           // acquire attempts made
	Waited    time.Duration // time spent, including the attempts
	HolderTTL time.Duration // the holder's remaining lease at the last attempt, if known
	// HeldHere reports that another call of the same Client held the lock
	// when waiting ended: the waiter waited for its release without asking
	// the store (see driver.Lines.HandOff).
	HeldHere bool
	Cause    error // why waiting ended: ctx.Err() (matching context.Cause too), ErrClosed, or nil when WithWait elapsed or for TryAcquire
	LastErr  error // a backend error seen while waiting, before the lock was last found held
}

// Error says which lock was not acquired, after how long, and why.
func (e *NotAcquiredError) Error() string {
	msg := fmt.Sprintf("fencelock: lock %q not acquired", e.Key)
	if e.Attempts > 1 {
		msg += fmt.Sprintf(" after %d attempts in %v", e.Attempts, e.Waited.Round(time.Millisecond))
	}
	if e.HolderTTL > 0 {
		msg += fmt.Sprintf(" (holder's lease ends in %v)", e.HolderTTL.Round(time.Millisecond))
	}
	if e.HeldHere {
		msg += " (held by another call of this Client)"
	}
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	if e.LastErr != nil {
		msg += " (last error: " + e.LastErr.Error() + ")"
	}
	return msg
}

// Unwrap returns ErrNotAcquired and the reason waiting ended, so that
// errors.Is(err, ErrNotAcquired), errors.Is(err, context.DeadlineExceeded)
// and errors.Is(err, ErrClosed) work.
func (e *NotAcquiredError) Unwrap() []error {
	errs := []error{ErrNotAcquired}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	if e.LastErr != nil {
		errs = append(errs, e.LastErr)
	}
	return errs
}

// UnavailableError is returned when a call could not be completed because
// the backend could not be reached or did not answer in time. It matches
// ErrUnavailable and, through Unwrap, the last backend error and the reason
// the call stopped trying (ctx.Err(), ErrClosed) when there is one.
type UnavailableError struct {
	Op       string        // "acquire", "release", "refresh", "ttl" or "check"
	Key      string        // the lock key, without namespace
	Attempts int           // requests made
	Waited   time.Duration // time spent
	Cause    error         // why the call stopped: ctx.Err() (matching context.Cause too), ErrClosed, or nil (a single attempt, WithWait elapsed, or WithMaxFailures reached)
	Err      error         // the last backend error, such as a connection error or a timeout
}

// Error says which call failed, after how many attempts, and why.
func (e *UnavailableError) Error() string {
	msg := fmt.Sprintf("fencelock: %s %q: backend unavailable", e.Op, e.Key)
	if e.Key == "" { // a call about no lock in particular (Check)
		msg = fmt.Sprintf("fencelock: %s: backend unavailable", e.Op)
	}
	if e.Attempts > 1 {
		msg += fmt.Sprintf(" (%d attempts in %v)", e.Attempts, e.Waited.Round(time.Millisecond))
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Cause != nil && e.Cause != e.Err {
		msg += " (" + e.Cause.Error() + ")"
	}
	return msg
}

// Unwrap returns ErrUnavailable, the last backend error and the reason the
// call stopped, so that errors.Is(err, ErrUnavailable) and errors.Is(err,
// context.DeadlineExceeded) work.
func (e *UnavailableError) Unwrap() []error {
	errs := []error{ErrUnavailable}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	if e.Cause != nil && e.Cause != e.Err {
		errs = append(errs, e.Cause)
	}
	return errs
}

// errReplyTooLate is the error of an acquire attempt that got no reply
// before the local deadline of the lease it asked for: the lease may have
// ended on the server already, so a lock granted by it is of no use.
var errReplyTooLate = errors.New("no reply")

// errNilLock is the error of every method called on a nil *Lock.
var errNilLock = invalid("lock", nil, "is a nil *Lock (was the error of the acquire checked?)")

// errNilClient is the error of every method called on a nil *Client.
var errNilClient = invalid("client", nil, "is a nil *Client")

// errNilContext is the error of every call given a nil context.Context,
// returned before the call does anything.
var errNilContext = invalid("ctx", nil, "must not be nil (pass context.Background() when there is no other)")

// mustContext panics, naming the function fn, when ctx is nil: for the
// functions that have no error to report it with (WithOwner, Context).
func mustContext(fn string, ctx context.Context) {
	if ctx == nil {
		panic("fencelock: " + fn + " called with a nil context.Context")
	}
}

// joinedError is several errors as one: it matches each of them (errors.Is,
// errors.As), and its message says them on one line.
type joinedError struct {
	msg  string
	errs []error
}

func (e *joinedError) Error() string   { return e.msg }
func (e *joinedError) Unwrap() []error { return e.errs }

// oneLine returns msg with its line breaks replaced by "; ", so that an
// error fencelock returns is one line also when it carries a caller's error
// made by errors.Join.
func oneLine(msg string) string { return strings.ReplaceAll(msg, "\n", "; ") }

// joinErrors is errors.Join on one line: the messages are separated by
// "; ". It returns nil when every error is nil, and a lone error as it is.
func joinErrors(errs ...error) error {
	var kept []error
	var msgs []string
	for _, err := range errs {
		if err != nil {
			kept = append(kept, err)
			msgs = append(msgs, oneLine(err.Error()))
		}
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return &joinedError{msg: strings.Join(msgs, "; "), errs: kept}
}

// runError is the error of a call that ran fn under a hold (Do, DoAll,
// RunJob): fn's error, and the hold's (its loss, or the failure of its
// release), as one error that matches both, on one line. prefix names the
// call and its key, as lockError does. The hold's error is said once: not
// again when fn's error already says it (fn returned its context's cause,
// or wrapped it).
func runError(prefix string, fnErr, holdErr error) error {
	switch {
	case holdErr == nil:
		return fnErr
	case fnErr == nil:
		return fmt.Errorf("%s: %w", prefix, holdErr)
	}
	fnMsg, holdMsg := oneLine(fnErr.Error()), oneLine(holdErr.Error())
	msg := prefix + ": " + fnMsg
	if !errors.Is(fnErr, holdErr) && !strings.Contains(fnMsg, holdMsg) {
		msg += "; " + holdMsg
	}
	return &joinedError{msg: msg, errs: []error{fnErr, holdErr}}
}

// lockError wraps err with the operation and key, keeping it matchable.
func lockError(op, key string, err error) error {
	return fmt.Errorf("fencelock: %s %q: %w", op, key, err)
}
