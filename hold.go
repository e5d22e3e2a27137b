package fencelock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Holds of things other than the plain lock (semaphore permits, read and
// write holds of a read-write lock) are *Lock values too: they have a
// fence, a lease kept by the one lease keeper, Done, Err, Context, Refresh
// and Release. What differs is which backend calls take, renew and give
// them up; a primitive supplies those, and the rest of the Client does not
// know one kind of hold from another.

// holdOps are the backend calls that keep and give up a hold once taken.
// A *Lock whose ops field is nil is a plain lock, kept by Backend's own
// Renew, Release and TTL.
type holdOps interface {
	renew(ctx context.Context, reqs []RenewRequest) ([]RenewResult, error)
	release(ctx context.Context, req ReleaseRequest) (ReleaseResult, error)
	ttl(ctx context.Context, ref LockRef) (time.Duration, error)
}

// primitive is what a waiter needs to take a hold that is not a plain lock:
// its acquire call, its release notifications, and the calls that keep the
// hold (ops). A primitive's waiters do not line up in the Client's line for
// the key (queue.go), which is for the plain lock's one holder: several
// permits or readers can be granted at once.
type primitive struct {
	ops holdOps
	// acquire makes one attempt; single says the call makes only one (the
	// primitive then registers nothing that outlives it, such as a
	// writer's intent).
	acquire func(ctx context.Context, req AcquireRequest, single bool) (AcquireResult, error)
	// watch registers for release notifications; nil when the backend has
	// none (the waiter polls).
	watch func(ctx context.Context, namespace, key string) (*Watch, error)
	// keepAlive, when positive, is how often a waiter must attempt at the
	// least, because each attempt renews something on the server that
	// lapses otherwise (a writer's intent). Such a waiter also releases its
	// token when it gives up, to withdraw what it registered.
	keepAlive time.Duration
}

// holdOps returns the calls that keep l.
func (l *Lock) holdOps() holdOps {
	if l.ops != nil {
		return l.ops
	}
	return l.client.plain
}

// plainOps are the plain lock's calls: the Backend's own.
type plainOps struct{ b Backend }

func (p plainOps) renew(ctx context.Context, reqs []RenewRequest) ([]RenewResult, error) {
	return p.b.Renew(ctx, reqs)
}

func (p plainOps) release(ctx context.Context, req ReleaseRequest) (ReleaseResult, error) {
	return p.b.Release(ctx, req)
}

func (p plainOps) ttl(ctx context.Context, ref LockRef) (time.Duration, error) {
	return p.b.TTL(ctx, ref)
}

// opsOr returns ops, or the plain lock's calls when ops is nil.
func (c *Client) opsOr(ops holdOps) holdOps {
	if ops != nil {
		return ops
	}
	return c.plain
}

// renewHolds sends the renewals reqs of locks (in the same order). When the
// holds are all of one kind, which is the usual case, that is one backend
// call; a batch that mixes kinds makes one call per kind, at the same time,
// so it still takes one round trip. The failure of one kind's call is a
// per-lock error of its holds (RenewResult.Err), not of the batch.
func (c *Client) renewHolds(ctx context.Context, locks []*Lock, reqs []RenewRequest) ([]RenewResult, error) {
	first := locks[0].ops
	mixed := false
	for _, l := range locks[1:] {
		if l.ops != first {
			mixed = true
			break
		}
	}
	if !mixed {
		return c.opsOr(first).renew(ctx, reqs)
	}
	groups := map[holdOps][]int{}
	for i, l := range locks {
		groups[l.ops] = append(groups[l.ops], i)
	}
	results := make([]RenewResult, len(reqs))
	var wg sync.WaitGroup
	for ops, idx := range groups {
		wg.Go(func() {
			part := make([]RenewRequest, len(idx))
			for j, i := range idx {
				part[j] = reqs[i]
			}
			res, err := c.opsOr(ops).renew(ctx, part)
			if err == nil && len(res) != len(part) {
				err = errBatchSize(len(res), len(part))
			}
			for j, i := range idx {
				if err != nil {
					results[i] = RenewResult{Err: err}
				} else {
					results[i] = res[j]
				}
			}
		})
	}
	wg.Wait()
	return results, nil
}

// errBatchSize is the error of a renewal call that returned the wrong
// number of results.
func errBatchSize(got, want int) error {
	return fmt.Errorf("backend returned %d results for %d renewals", got, want)
}
