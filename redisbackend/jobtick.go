package redisbackend

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencelock/fencelock/driver"
)

// The record of a job's last claimed tick (driver.Ticker) is
// the hash NS:{KEY}:tick beside the job's lock (keys.go), in the lock's
// hash slot: fields tick and token, the claim; ptick and ptoken, the claim
// it replaced, which an undo (UndoTickClaim) puts back. It expires with
// the record's life, set again by every claim.

// acquireTickScript is the acquire script preceded by the check of the
// job's record and followed by its write: lua/acquire_tick.lua.
var acquireTickScript = newScript(luaScript("acquire_tick.lua"))

// undoTickClaimScript puts back the claim that token's claim replaced:
// lua/undo_tick_claim.lua.
var undoTickClaimScript = newScript(luaScript("undo_tick_claim.lua"))

// AcquireTick implements driver.Ticker with one script run. With
// replica acknowledgement, a claim too few replicas acknowledged is
// released and undone (UndoTickClaim), and fails as an acquire does.
func (b *Backend) AcquireTick(ctx context.Context, req driver.TickRequest) (driver.TickResult, error) {
	if req.Kind != driver.KindLock {
		return driver.TickResult{}, fmt.Errorf("%w: job ticks are recorded with plain locks only", driver.ErrUnsupported)
	}
	if err := b.checkAcquire(req.Request); err != nil {
		return driver.TickResult{}, err
	}
	if err := checkTick(req); err != nil {
		return driver.TickResult{}, err
	}
	k := keysFor(req.Namespace, req.Key)
	res, err := guard(b, ctx, func(ctx context.Context) (driver.TickResult, error) {
		keys := []string{k.lock, k.fence, k.tombstone(req.Token), k.tick()}
		args := append([]any{req.Tick, ms(req.RecordLife)}, b.acquireArgs(k, req.Request)...)
		if b.ack != nil {
			return b.acquireTickAcked(ctx, keys, k, req, args)
		}
		res, err := tickResult(b.pipe.run(ctx, acquireTickScript, keys, args...))
		if err != nil {
			return driver.TickResult{}, classify(err)
		}
		return res, nil
	})
	if err == nil {
		b.notifyAcquired(ctx, req.Request, res.Result, k)
	}
	return res, err
}

// acquireTickAcked runs the tick script with replica acknowledgement. A
// claim too few replicas acknowledged is released and undone at once: no
// run began under it, so its tick stays free.
func (b *Backend) acquireTickAcked(ctx context.Context, keys []string, k lockKeys, req driver.TickRequest, args []any) (driver.TickResult, error) {
	cmd, acks, err := b.runAcked(ctx, acquireTickScript, keys, args...)
	if err != nil {
		return driver.TickResult{}, classify(err)
	}
	res, err := tickResult(cmd)
	if err != nil {
		return driver.TickResult{}, classify(err)
	}
	if !res.Acquired || acks >= int64(b.ack.replicas) {
		return res, nil
	}
	if err := b.releaseUnreplicated(ctx, k, req.Token, acks); err != nil {
		return driver.TickResult{}, err
	}
	if err := b.pipe.run(ctx, undoTickClaimScript, []string{k.tick()}, req.Token).Err; err != nil {
		return driver.TickResult{}, fmt.Errorf("%w (and undoing its claim of the tick failed: %w)", b.ack.notReplicated(acks), err)
	}
	return driver.TickResult{}, b.ack.notReplicated(acks)
}

// UndoTickClaim undoes the claim of a job's tick by token
// (driver.Ticker): if the record of the lock named key still
// names that claim, the claim it replaced is put back (or the record is
// deleted, when there was none). It reports whether it undid the claim.
// It is for backends that combine several servers (the redlock package),
// which undo the claims of an acquisition that did not reach a majority,
// together with its holds; it does not release the hold.
func (b *Backend) UndoTickClaim(ctx context.Context, namespace, key, token string) (bool, error) {
	if b.optErr != nil {
		return false, b.optErr
	}
	if err := checkNames(namespace, key); err != nil {
		return false, err
	}
	k := keysFor(namespace, key)
	undone, err := guard(b, ctx, func(ctx context.Context) (int64, error) {
		return b.pipe.run(ctx, undoTickClaimScript, []string{k.tick()}, token).int64()
	})
	if err != nil {
		return false, classify(err)
	}
	return undone == 1, nil
}

// checkTick refuses a tick or a record life the script cannot take.
func checkTick(req driver.TickRequest) error {
	if req.Tick == "" || strings.IndexByte(req.Tick, 0) >= 0 {
		return &driver.InvalidArgumentError{Name: "tick", Value: req.Tick, Reason: "must be non-empty, without a NUL byte"}
	}
	return checkLease("record life", req.RecordLife)
}

// tickResult decodes the reply of the tick script: the acquire script's
// (acquireReply), or {2, tick, token} when the tick was claimed.
func tickResult(r Reply) (driver.TickResult, error) {
	reply, ok := r.Value.([]any)
	if r.Err != nil || !ok {
		res, err := acquireReply(r)
		return driver.TickResult{Result: res}, err
	}
	if len(reply) == 3 {
		if n, ok := reply[0].(int64); ok && n == 2 {
			tick, ok1 := reply[1].(string)
			token, ok2 := reply[2].(string)
			if !ok1 || !ok2 {
				return driver.TickResult{}, fmt.Errorf("redisbackend: tick script returned %v", reply)
			}
			return driver.TickResult{Claimed: true, LastTick: tick, LastToken: token}, nil
		}
	}
	vals := make([]int64, len(reply))
	for i, v := range reply {
		n, ok := v.(int64)
		if !ok {
			return driver.TickResult{}, fmt.Errorf("redisbackend: tick script returned %v", reply)
		}
		vals[i] = n
	}
	res, err := acquireResult(vals)
	return driver.TickResult{Result: res}, err
}
