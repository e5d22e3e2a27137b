package driver

import (
	"errors"
	"fmt"
	"time"
)

// Errors a store returns, or wraps in the errors it returns. The fencelock
// package re-exports each under the same name: they are the same values,
// so errors.Is matches them through either package.
var (
	// ErrInvalidArgument is matched by every *InvalidArgumentError: a
	// request, or a namespace, the store cannot serve as given. The Client
	// reports it to the caller and does not retry it.
	ErrInvalidArgument = errors.New("fencelock: invalid argument")

	// ErrMisconfigured means the store refused the client itself: its
	// credentials or its permissions (see Store). Retrying cannot help,
	// so the Client retries nothing.
	ErrMisconfigured = errors.New("fencelock: backend refused the client's configuration")

	// ErrNotSent is wrapped in the error of a request that was certainly not
	// sent (no connection could be made), so that the Client knows it left
	// nothing behind to clean up. Any other error is taken to mean the
	// request may have been applied.
	ErrNotSent = errors.New("fencelock: request not sent")

	// ErrNotReplicated means a request reached the store but too few
	// replicas acknowledged it in time, so a failover could lose it. An
	// acquire so answered has been released again by the store.
	ErrNotReplicated = errors.New("fencelock: not acknowledged by enough replicas")

	// ErrNotHeld means the store holds no hold for the token: it expired,
	// was released, or was taken over.
	ErrNotHeld = errors.New("fencelock: lock not held")

	// ErrUnsupported means the store lacks what the request needs (a kind
	// of hold it does not keep, a capability it does not have). The store
	// returns it before any I/O, and the Client does not retry it.
	ErrUnsupported = errors.New("fencelock: not supported by the backend")
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

// formatValue writes an argument's value in an error: strings quoted,
// durations as durations.
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
