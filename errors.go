package fencelock

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Match them with errors.Is; the errors fencelock returns
// wrap them with the key and the cause.
var (
	// ErrNotAcquired means the lock is held by someone else: TryAcquire found
	// it taken, or Acquire gave up waiting (its error then also matches the
	// reason it gave up, such as context.DeadlineExceeded or ErrClosed).
	ErrNotAcquired = errors.New("fencelock: lock not acquired")

	// ErrNotHeld means the server no longer holds the lock for this owner
	// token: it expired, was released, or was taken over.
	ErrNotHeld = errors.New("fencelock: lock not held")

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
	ErrInvalidArgument = errors.New("fencelock: invalid argument")
)

// InvalidArgumentError reports a bad argument by name and value. It matches
// ErrInvalidArgument.
type InvalidArgumentError struct {
	Name   string // the argument or option, such as "ttl" or "WithAutoRenew interval"
	Value  any    // the value given
	Reason string // what a valid value looks like
}

// Error describes the bad argument, its value and what is expected.
func (e *InvalidArgumentError) Error() string {
	return fmt.Sprintf("fencelock: invalid %s %s: %s", e.Name, formatValue(e.Value), e.Reason)
}

// Is reports whether target is ErrInvalidArgument.
func (e *InvalidArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

func formatValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "nil"
	case string:
		return fmt.Sprintf("%q", v)
	case time.Duration:
		return v.String()
	default:
		return fmt.Sprint(v)
	}
}

func invalid(name string, value any, reason string) error {
	return &InvalidArgumentError{Name: name, Value: value, Reason: reason}
}

// NotAcquiredError is returned when a lock could not be had. It matches
// ErrNotAcquired and, through Unwrap, the reason Acquire stopped waiting
// (ctx.Err(), ErrClosed) when there is one.
type NotAcquiredError struct {
	Key       string        // the lock key, without namespace
	Attempts  int           // acquire attempts made
	Waited    time.Duration // time spent, including the attempts
	HolderTTL time.Duration // the holder's remaining lease at the last attempt, if known
	Cause     error         // why waiting ended: ctx.Err(), ErrClosed, or nil when WithWait elapsed or for TryAcquire
	LastErr   error         // the last backend error seen while waiting, if any
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
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	if e.LastErr != nil {
		msg += " (last error: " + e.LastErr.Error() + ")"
	}
	return msg
}

// Is reports whether target is ErrNotAcquired.
func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// Unwrap returns the reason waiting ended, so that errors.Is(err,
// context.DeadlineExceeded) and errors.Is(err, ErrClosed) work.
func (e *NotAcquiredError) Unwrap() []error {
	var errs []error
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	if e.LastErr != nil {
		errs = append(errs, e.LastErr)
	}
	return errs
}

// lockError wraps err with the operation and key, keeping it matchable.
func lockError(op, key string, err error) error {
	return fmt.Errorf("fencelock: %s %q: %w", op, key, err)
}
