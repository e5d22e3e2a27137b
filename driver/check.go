package driver

import (
	"context"
)

// Checker is implemented by backends that can check, before any lock is
// taken, that they can serve a Client: that its namespace makes valid names
// for them and that the store is reachable and can run what they need. The
// Redis backend implements it.
type Checker interface {
	// Check reports a namespace the backend cannot use (an error matching
	// ErrInvalidArgument) or a store it cannot use (any other error).
	Check(ctx context.Context, namespace string) error
}
