package redisbackend

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencelock/fencelock"
)

// The record of a job's last claimed tick (fencelock.JobTickBackend) is
// the hash NS:{KEY}:tick beside the job's lock (keys.go), in the lock's
// hash slot: fields tick and token, the claim; ptick and ptoken, the claim
// it replaced, which an undo (UndoTickClaim) puts back. It expires with
// the record's life, set again by every claim.

var _ fencelock.JobTickBackend = (*Backend)(nil)

// acquireTickScript is the acquire script (acquireBody, run as a function)
// preceded by the check of the job's record, and followed by its write
// when the lock is taken, in one step: a record that names the tick asked
// for or a later one refuses the attempt (and changes nothing), unless it
// is this very claim, the tick's by this token (its acquire's reply was
// lost: this is a retry). Ticks are compared byte by byte: Lua's
// < on strings follows the server's locale.
//
//	KEYS: lock, fence counter, tombstone, tick record
//	ARGV: tick, record life (ms), then the acquire script's ARGV: owner,
//	      token, ttl (ms), counter expiry (ms, 0: none), fence floor[,
//	      process, identity]
//	returns the acquire script's reply, or {2, the record's tick, its
//	token} when the tick was claimed.
var acquireTickScript = newScript(takeFunctions + `
local function acquire(ARGV)
` + acquireBody + `
end

local function before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local record, tick, life, token = KEYS[4], ARGV[1], tonumber(ARGV[2]), ARGV[4]
local last = redis.call('HMGET', record, 'tick', 'token')
local mine = last[1] == tick and last[2] == token
if last[1] and not mine and not before(last[1], tick) then
  return {2, last[1], last[2] or ''}
end
local res = acquire({unpack(ARGV, 3)})
if res[1] == 1 then
  if not mine then
    if last[1] then
      redis.call('HSET', record, 'tick', tick, 'token', token, 'ptick', last[1], 'ptoken', last[2] or '')
    else
      redis.call('HSET', record, 'tick', tick, 'token', token)
    end
  end
  redis.call('PEXPIRE', record, life)
end
return res
`)

// undoTickClaimScript puts back the claim that the claim of token
// replaced, if the record still names token's claim (or deletes the
// record when there was none); the record keeps its expiry.
//
//	KEYS: tick record    ARGV: token
//	returns 1 when it undid the claim, 0 when the record names another.
var undoTickClaimScript = newScript(`
local record = KEYS[1]
local last = redis.call('HMGET', record, 'token', 'ptick', 'ptoken')
if last[1] ~= ARGV[1] then
  return 0
end
if last[2] then
  redis.call('HSET', record, 'tick', last[2], 'token', last[3] or '')
  redis.call('HDEL', record, 'ptick', 'ptoken')
else
  redis.call('DEL', record)
end
return 1
`)

// AcquireTick implements fencelock.JobTickBackend with one script run. With
// replica acknowledgement, a claim too few replicas acknowledged is
// released and undone (UndoTickClaim), and fails as an acquire does.
func (b *Backend) AcquireTick(ctx context.Context, req fencelock.TickRequest) (fencelock.TickResult, error) {
	if err := b.checkAcquire(req.Request); err != nil {
		return fencelock.TickResult{}, err
	}
	if err := checkTick(req); err != nil {
		return fencelock.TickResult{}, err
	}
	k := keysFor(req.Namespace, req.Key)
	res, err := guard(b, ctx, func(ctx context.Context) (fencelock.TickResult, error) {
		keys := []string{k.lock, k.fence, k.tombstone(req.Token), k.tick()}
		args := append([]any{req.Tick, ms(req.RecordLife)}, b.acquireArgs(k, req.Request)...)
		if b.ack != nil {
			return b.acquireTickAcked(ctx, keys, k, req, args)
		}
		reply, err := b.pipe.run(ctx, acquireTickScript, keys, args...).Slice()
		if err != nil {
			return fencelock.TickResult{}, classify(err)
		}
		return tickResult(reply)
	})
	if err == nil {
		b.notifyAcquired(ctx, req.Request, res.Result, k)
	}
	return res, err
}

// acquireTickAcked runs the tick script with replica acknowledgement. A
// claim too few replicas acknowledged is released and undone at once: no
// run began under it, so its tick stays free.
func (b *Backend) acquireTickAcked(ctx context.Context, keys []string, k lockKeys, req fencelock.TickRequest, args []any) (fencelock.TickResult, error) {
	cmd, acks, err := b.runAcked(ctx, acquireTickScript, keys, args...)
	if err != nil {
		return fencelock.TickResult{}, classify(err)
	}
	reply, err := cmd.Slice()
	if err != nil {
		return fencelock.TickResult{}, classify(err)
	}
	res, err := tickResult(reply)
	if err != nil || !res.Acquired || acks >= int64(b.ack.replicas) {
		return res, err
	}
	if _, err := b.pipe.run(ctx, releaseScript, k.releaseKeys(req.Token), req.Token, k.channel, 0, ms(b.counterExpiry), "", "0", 0).Int64(); err != nil {
		return fencelock.TickResult{}, fmt.Errorf("%w (and its release failed: %w)", b.ack.notReplicated(acks), err)
	}
	if err := b.pipe.run(ctx, undoTickClaimScript, []string{k.tick()}, req.Token).Err(); err != nil {
		return fencelock.TickResult{}, fmt.Errorf("%w (and undoing its claim of the tick failed: %w)", b.ack.notReplicated(acks), err)
	}
	return fencelock.TickResult{}, b.ack.notReplicated(acks)
}

// UndoTickClaim undoes the claim of a job's tick by token
// (fencelock.JobTickBackend): if the record of the lock named key still
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
		return b.pipe.run(ctx, undoTickClaimScript, []string{k.tick()}, token).Int64()
	})
	if err != nil {
		return false, classify(err)
	}
	return undone == 1, nil
}

// checkTick refuses a tick or a record life the script cannot take.
func checkTick(req fencelock.TickRequest) error {
	if req.Tick == "" || strings.IndexByte(req.Tick, 0) >= 0 {
		return &fencelock.InvalidArgumentError{Name: "tick", Value: req.Tick, Reason: "must be non-empty, without a NUL byte"}
	}
	return checkLease("record life", req.RecordLife)
}

// tickResult decodes the reply of the tick script: the acquire script's,
// or {2, tick, token} when the tick was claimed.
func tickResult(reply []any) (fencelock.TickResult, error) {
	if len(reply) == 3 {
		if n, ok := reply[0].(int64); ok && n == 2 {
			tick, ok1 := reply[1].(string)
			token, ok2 := reply[2].(string)
			if !ok1 || !ok2 {
				return fencelock.TickResult{}, fmt.Errorf("redisbackend: tick script returned %v", reply)
			}
			return fencelock.TickResult{Claimed: true, LastTick: tick, LastToken: token}, nil
		}
	}
	vals := make([]int64, len(reply))
	for i, v := range reply {
		n, ok := v.(int64)
		if !ok {
			return fencelock.TickResult{}, fmt.Errorf("redisbackend: tick script returned %v", reply)
		}
		vals[i] = n
	}
	res, err := acquireResult(vals)
	return fencelock.TickResult{Result: res}, err
}
