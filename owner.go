package fencelock

import (
	"context"
)

type ownerKey struct{}

// WithOwner returns a context that makes acquisitions re-entrant for owner:
// acquiring a key that owner already holds (through any Client on the same
// backend) succeeds at once with the same fencing token and one more hold;
// the lock is freed when every hold has been released. The context carries
// the owner along the call chain, as a thread identity does elsewhere.
//
// owner must identify one logical holder across all processes (for example a
// process id plus a job id): two processes that use the same owner share the
// lock. Without WithOwner nothing re-enters: a second acquisition of a held
// key waits like any other.
//
// It panics when ctx is nil, as context.WithValue does.
func WithOwner(ctx context.Context, owner string) context.Context {
	mustContext("WithOwner", ctx)
	return context.WithValue(ctx, ownerKey{}, owner)
}

// OwnerFromContext returns the owner set by WithOwner, if any. It panics
// when ctx is nil.
func OwnerFromContext(ctx context.Context) (owner string, ok bool) {
	mustContext("OwnerFromContext", ctx)
	owner, ok = ctx.Value(ownerKey{}).(string)
	return owner, ok
}
