package demo

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// demoKeys are the Redis keys of one scenario run. They share the lock's
// hash tag, so that they sit in the lock's Cluster slot.
//
//	NS:{KEY}:lock    the lock (fencelock's key layout)
//	NS:{KEY}:inside  the shared "inside" counter: INCR on entry, DECR on exit
//	NS:{KEY}:holder  "pid worker fence" of the worker inside (the master
//	                 reads it to pick a holder to pause or kill)
//	NS:{KEY}:epoch   set by the master; a change means Redis was restarted
//	                 and the counter above started again from nothing
//	NS:{KEY}:want    set by the master when it wants a victim for its next
//	                 failover: the next worker to enter claims it
//	NS:{KEY}:victim  "pid worker fence" of the worker that claimed it
//
// In the failover scenarios the lock lives elsewhere (a Sentinel group or a
// Cluster); the other keys stay on the demo's own redis-server, the
// referee, which no failover touches.
type demoKeys struct {
	lock, inside, holder, epoch, want, victim string
}

func keysFor(namespace, key string) demoKeys {
	base := namespace + ":{" + key + "}"
	return demoKeys{
		lock:   base + ":lock",
		inside: base + ":inside",
		holder: base + ":holder",
		epoch:  base + ":epoch",
		want:   base + ":want",
		victim: base + ":victim",
	}
}

// enterScript marks a worker inside, in one atomic step with publishing who
// it is. It refuses (-1) while the epoch key is missing: Redis was restarted
// and the master has not yet started the new epoch. If the master wants a
// victim for a failover, the entering worker is it (the third value is 1).
//
//	KEYS: inside, holder, epoch, want, victim    ARGV: holder value
//	returns {INCR result, epoch, victim}, or {-1, "", 0}
var enterScript = redis.NewScript(`
local epoch = redis.call('GET', KEYS[3])
if not epoch then return {-1, '', 0} end
local n = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[2], ARGV[1])
local victim = 0
if redis.call('GET', KEYS[4]) then
  redis.call('DEL', KEYS[4])
  redis.call('SET', KEYS[5], ARGV[1])
  victim = 1
end
return {n, epoch, victim}
`)

// exitScript marks a worker outside, if Redis is still in the epoch in
// which it entered, and unpublishes it if the holder key still names it.
//
//	KEYS: inside, holder, epoch    ARGV: holder value, epoch at entry
//	returns {1, DECR result}, or {0, 0} when the epoch changed
var exitScript = redis.NewScript(`
if redis.call('GET', KEYS[3]) ~= ARGV[2] then return {0, 0} end
local n = redis.call('DECR', KEYS[1])
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return {1, n}
`)

// buryScript is the master's exit on behalf of a holder it killed: if the
// holder key still names it (its own exit did not run), unpublish it and
// take it out of the counter.
//
//	KEYS: inside, holder    ARGV: holder value
//	returns {1, DECR result}, or {0, 0} when the worker had left already
var buryScript = redis.NewScript(`
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return {0, 0} end
redis.call('DEL', KEYS[2])
return {1, redis.call('DECR', KEYS[1])}
`)

func (h holderValue) String() string {
	return fmt.Sprintf("%d %d %d", h.Pid, h.Worker, h.Fence)
}

func parseHolder(s string) (holderValue, bool) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return holderValue{}, false
	}
	pid, err1 := strconv.Atoi(f[0])
	w, err2 := strconv.Atoi(f[1])
	fence, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return holderValue{}, false
	}
	return holderValue{Pid: pid, Worker: w, Fence: fence}, true
}

// pair runs a script that returns two integers (the second may be a
// string holding one).
func pair(ctx context.Context, rdb redis.Scripter, s *redis.Script, keys []string, args ...any) (int64, string, error) {
	a, b, _, err := triple(ctx, rdb, s, 2, keys, args...)
	return a, b, err
}

// triple runs a script that returns n (2 or 3) values: an integer, an
// integer or a string holding one, and (n = 3) an integer.
func triple(ctx context.Context, rdb redis.Scripter, s *redis.Script, n int, keys []string, args ...any) (int64, string, int64, error) {
	res, err := s.Run(ctx, rdb, keys, args...).Slice()
	if err != nil {
		return 0, "", 0, err
	}
	if len(res) != n {
		return 0, "", 0, fmt.Errorf("demo: unexpected script reply %v", res)
	}
	var c int64
	if n == 3 {
		var ok bool
		if c, ok = res[2].(int64); !ok {
			return 0, "", 0, fmt.Errorf("demo: unexpected script reply %v", res)
		}
	}
	a, b, err := firstTwo(res)
	return a, b, c, err
}

// firstTwo decodes the first two values of a script's reply.
func firstTwo(res []any) (int64, string, error) {
	a, ok := res[0].(int64)
	if !ok {
		return 0, "", fmt.Errorf("demo: unexpected script reply %v", res)
	}
	switch b := res[1].(type) {
	case int64:
		return a, strconv.FormatInt(b, 10), nil
	case string:
		return a, b, nil
	default:
		return 0, "", fmt.Errorf("demo: unexpected script reply %v", res)
	}
}

// scanDelete deletes every key matching pattern.
func scanDelete(ctx context.Context, rdb *redis.Client, pattern string) error {
	iter := rdb.Scan(ctx, 0, pattern, 500).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return rdb.Unlink(ctx, batch...).Err()
	}
	return nil
}
