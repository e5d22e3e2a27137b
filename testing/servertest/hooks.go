package servertest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// AcquireAttempts is a go-redis hook that counts the fencelock acquire
// attempts a client had answered: the acquire script (EVAL or EVALSHA with 3
// keys), not counting a NOSCRIPT reply (the same attempt follows as EVAL).
// On a ClusterClient it counts attempts to every node. Tests use it to wait
// until a waiter has really asked, instead of sleeping.
//
// With Keys set, it counts the scripts with that many keys and at least
// MinArgs arguments after them instead (the fair acquire script: 5 keys and
// 7 or more arguments; the release script has 5 keys and 4).
type AcquireAttempts struct {
	Keys    int // keys of the counted script; 0: 3, the acquire script's
	MinArgs int // arguments after the keys, at least

	n atomic.Int64
}

// Load returns the attempts answered so far.
func (h *AcquireAttempts) Load() int64 { return h.n.Load() }

func (h *AcquireAttempts) count(cmd redis.Cmder) {
	args := cmd.Args()
	want := h.Keys
	if want == 0 {
		want = 3
	}
	if len(args) < 3+want+h.MinArgs {
		return
	}
	if name, _ := args[0].(string); name != "eval" && name != "evalsha" {
		return
	}
	if keys, _ := args[2].(int); keys != want || redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		return
	}
	h.n.Add(1)
}

// DialHook implements redis.Hook.
func (h *AcquireAttempts) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *AcquireAttempts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *AcquireAttempts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return err
	}
}
