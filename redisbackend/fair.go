package redisbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
)

// The line of fair waiters (fencelock.WithFairness) lives on the server, so
// that it is one line across every process: a sorted set of waiter tokens
// by arrival, and a hash of the moment (server ms) each place lapses unless
// its waiter renews it (keys.go). A waiter that crashed or was paused keeps
// the line waiting for the rest of its place's lease at most.

// fairAcquireScript is acquireScript for a waiter in the line of fair
// waiters: lua/fair_acquire.lua.
var fairAcquireScript = newScript(luaScript("fair_acquire.lua"))

var _ fencelock.FairBackend = (*Backend)(nil)

// AcquireFair implements fencelock.FairBackend: Acquire for a waiter in the
// lock's line of fair waiters, kept on the server.
func (b *Backend) AcquireFair(ctx context.Context, req fencelock.AcquireRequest, place time.Duration) (fencelock.AcquireResult, error) {
	return b.acquireFair(ctx, req, place, 0, 0)
}

var _ fencelock.FairGranter = (*Backend)(nil)

// AcquireFairGrant implements fencelock.FairGranter: AcquireFair for a
// waiter whose turn may come as a grant, the release script taking the lock
// for it. With replica acknowledgement (WithReplicaAck) there are no grants:
// a release is not acknowledged on the waiter's behalf, so its turn wakes it
// to acquire as AcquireFair does.
func (b *Backend) AcquireFairGrant(ctx context.Context, req fencelock.AcquireRequest, place, grant time.Duration, seq int64) (fencelock.AcquireResult, error) {
	if b.ack != nil || place <= 0 {
		grant = 0
	}
	if grant != 0 {
		if err := checkLease("grant", grant); err != nil {
			return fencelock.AcquireResult{}, err
		}
		if grant > req.TTL {
			return fencelock.AcquireResult{}, fmt.Errorf("%w: grant %v longer than the ttl %v", fencelock.ErrInvalidArgument, grant, req.TTL)
		}
		if seq <= 0 {
			return fencelock.AcquireResult{}, fmt.Errorf("%w: attempt number %d, not positive", fencelock.ErrInvalidArgument, seq)
		}
	}
	return b.acquireFair(ctx, req, place, grant, seq)
}

func (b *Backend) acquireFair(ctx context.Context, req fencelock.AcquireRequest, place, grant time.Duration, seq int64) (fencelock.AcquireResult, error) {
	if b.optErr != nil {
		return fencelock.AcquireResult{}, b.optErr
	}
	if err := checkNames(req.Namespace, req.Key); err != nil {
		return fencelock.AcquireResult{}, err
	}
	if err := checkLease("ttl", req.TTL); err != nil {
		return fencelock.AcquireResult{}, err
	}
	if place != 0 {
		if err := checkLease("place", place); err != nil {
			return fencelock.AcquireResult{}, err
		}
	}
	k := keysFor(req.Namespace, req.Key)
	keys := []string{k.lock, k.fence, k.tombstone(req.Token), k.queue(), k.queueEnds()}
	grantChannel := ""
	if grant > 0 && b.notifier != nil {
		grantChannel = b.notifier.grantChannel(req.Namespace)
	}
	args := []any{req.Owner, req.Token, ms(req.TTL), ms(b.counterExpiry), max(req.FenceFloor, 0), ms(max(place, 0)), k.channel,
		ms(max(grant, 0)), seq, grantChannel}
	if req.Identity != "" {
		args = append(args, req.Identity)
	}
	res, err := guard(b, ctx, func(ctx context.Context) (fencelock.AcquireResult, error) {
		var vals []int64
		var err error
		if b.ack != nil {
			vals, err = b.acquireAcked(ctx, fairAcquireScript, keys, k, req, args)
		} else {
			vals, err = b.pipe.run(ctx, fairAcquireScript, keys, args...).Int64Slice()
		}
		if err != nil {
			return fencelock.AcquireResult{}, classify(err)
		}
		return acquireResult(vals)
	})
	if err == nil {
		b.notifyAcquired(ctx, req, res, k)
	}
	return res, err
}

// WatchTurn implements fencelock.FairBackend: the waiter with token is woken
// when the lock is freed while it is first in line, or when it becomes first
// in line of a free lock; not by releases that are other waiters' turns.
func (b *Backend) WatchTurn(ctx context.Context, namespace, key, token string) (*fencelock.Watch, error) {
	if b.notifier == nil {
		return nil, errNotificationsOff
	}
	return b.notifier.watchFor(ctx, namespace, keysFor(namespace, key).channel, token)
}

// acquireResult decodes the reply of an acquire script.
func acquireResult(vals []int64) (fencelock.AcquireResult, error) {
	var res fencelock.AcquireResult
	if len(vals) < 3 {
		return res, fmt.Errorf("redisbackend: acquire script returned %v", vals)
	}
	res.Acquired, res.Fence, res.Holds = vals[0] == 1, vals[1], int(vals[2])
	if !res.Acquired && len(vals) > 3 && vals[3] >= 0 {
		// 0 means the lease ends within the millisecond: retry then,
		// not after a whole backoff.
		res.HolderTTL = max(time.Duration(vals[3])*time.Millisecond, time.Millisecond)
	}
	return res, nil
}
