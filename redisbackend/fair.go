package redisbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// The line of fair waiters (fencelock.WithFairness) lives on the server, so
// that it is one line across every process: a sorted set of waiter tokens
// by arrival, and a hash of the moment (server ms) each place lapses unless
// its waiter renews it (keys.go). A waiter that crashed or was paused keeps
// the line waiting for the rest of its place's lease at most.

// fairAcquireScript is acquireScript for a waiter in the line of fair
// waiters: lua/fair_acquire.lua.
var fairAcquireScript = newScript(luaScript("fair_acquire.lua"))

// AcquireInLine implements driver.Lines: Acquire for a waiter in the
// lock's line of fair waiters, kept on the server. A waiter that joins the
// line (t.Place) may have its turn come as a grant, the release script
// taking the lock for it (t.Grant). With replica acknowledgement
// (WithReplicaAck) there are no grants: a release is not acknowledged on
// the waiter's behalf, so its turn wakes it to acquire.
func (b *Backend) AcquireInLine(ctx context.Context, req driver.Request, t driver.Turn) (driver.Result, error) {
	if req.Kind != driver.KindLock {
		return driver.Result{}, fmt.Errorf("%w: redisbackend keeps lines of waiters for plain locks only", driver.ErrUnsupported)
	}
	place, grant, seq := t.Place, t.Grant, t.Seq
	if b.ack != nil || place <= 0 {
		grant = 0
	}
	if grant != 0 {
		if err := checkLease("grant", grant); err != nil {
			return driver.Result{}, err
		}
		if grant > req.TTL {
			return driver.Result{}, fmt.Errorf("%w: grant %v longer than the ttl %v", driver.ErrInvalidArgument, grant, req.TTL)
		}
		if seq <= 0 {
			return driver.Result{}, fmt.Errorf("%w: attempt number %d, not positive", driver.ErrInvalidArgument, seq)
		}
	}
	return b.acquireFair(ctx, req, place, grant, seq)
}

func (b *Backend) acquireFair(ctx context.Context, req driver.Request, place, grant time.Duration, seq int64) (driver.Result, error) {
	if b.optErr != nil {
		return driver.Result{}, b.optErr
	}
	if err := checkNames(req.Namespace, req.Key); err != nil {
		return driver.Result{}, err
	}
	if err := checkLease("ttl", req.TTL); err != nil {
		return driver.Result{}, err
	}
	if place != 0 {
		if err := checkLease("place", place); err != nil {
			return driver.Result{}, err
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
	res, err := guard(b, ctx, func(ctx context.Context) (driver.Result, error) {
		if b.ack != nil {
			return b.acquireAcked(ctx, fairAcquireScript, keys, k, req, args)
		}
		res, err := acquireReply(b.pipe.run(ctx, fairAcquireScript, keys, args...))
		if err != nil {
			return driver.Result{}, classify(err)
		}
		return res, nil
	})
	if err == nil {
		b.notifyAcquired(ctx, req, res, k)
	}
	return res, err
}

// acquireReply decodes the reply of a lock's acquire script (acquire.lua,
// fair_acquire.lua): the new fence alone when it took a free lock, a
// table of integers otherwise (acquireResult).
func acquireReply(r Reply) (driver.Result, error) {
	if r.Err != nil {
		return driver.Result{}, r.Err
	}
	if fence, ok := r.Value.(int64); ok {
		if fence <= 0 {
			return driver.Result{}, fmt.Errorf("redisbackend: acquire script returned fence %d", fence)
		}
		return driver.Result{Acquired: true, Fence: fence, Holds: 1}, nil
	}
	vals, err := r.int64Slice()
	if err != nil {
		return driver.Result{}, err
	}
	return acquireResult(vals)
}

// acquireResult decodes the table reply of an acquire script: {1, fence,
// holds} when held, {0, 0, 0, the holder's remaining lease (ms) or -1}
// when not.
func acquireResult(vals []int64) (driver.Result, error) {
	var res driver.Result
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
