package redisbackend

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// coalescer sends script calls made at the same time by many goroutines in
// shared pipelines: one write and one read for the whole group, on the client
// and on the server. A call made while fewer than maxFlushers groups are in
// flight is sent at once, alone, so a lone caller pays no delay; calls made
// while the pipe is full queue up, and the next free sender takes them all.
// No goroutine of its own: callers take turns sending.
type coalescer struct {
	rdb         redis.UniversalClient
	scripts     *scriptCache
	maxFlushers int

	mu       sync.Mutex
	queue    []*pendingCall
	flushers int // calls in flight, up to maxFlushers
}

// pendingCall is one queued script call.
type pendingCall struct {
	ctx  context.Context
	s    script
	keys []string
	args []any

	cmd   *redis.Cmd
	done  chan struct{}  // closed when cmd has its reply
	lead  chan struct{}  // closed when this call's goroutine must send batch
	batch []*pendingCall // the queue handed over with lead (this call first)
}

// run runs one script call, possibly in a pipeline with others.
func (c *coalescer) run(ctx context.Context, s script, keys []string, args ...any) *redis.Cmd {
	c.mu.Lock()
	if c.flushers < c.maxFlushers {
		// Alone: no pendingCall to make, nobody waits on this call.
		c.flushers++
		c.mu.Unlock()
		var cmd *redis.Cmd
		if err := ctx.Err(); err != nil {
			cmd = redis.NewCmd(ctx)
			cmd.SetErr(err)
		} else {
			cmd = c.scripts.run(ctx, c.rdb, s, keys, args...)
		}
		c.passTurn()
		return cmd
	}
	p := &pendingCall{ctx: ctx, s: s, keys: keys, args: args, done: make(chan struct{}), lead: make(chan struct{})}
	c.queue = append(c.queue, p)
	c.mu.Unlock()

	select {
	case <-p.done:
	case <-p.lead:
		// It is our turn to send what had queued up (our call first).
		c.send(p.batch)
	}
	return p.cmd
}

// send sends batch, then hands the sending turn to the first queued call, or
// gives it up.
func (c *coalescer) send(batch []*pendingCall) {
	c.exec(batch)
	for _, p := range batch {
		close(p.done)
	}
	c.passTurn()
}

// passTurn hands the sending turn of a call that has its reply to the
// first queued call, or gives it up.
func (c *coalescer) passTurn() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) > 0 {
		next := c.queue[0]
		next.batch, c.queue = c.queue, nil
		close(next.lead)
		return
	}
	c.flushers--
}

// exec runs the calls of batch: a lone call as itself, several in one
// pipeline. Calls whose context has ended are not sent.
func (c *coalescer) exec(batch []*pendingCall) {
	live := batch[:0:0]
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.cmd = redis.NewCmd(p.ctx)
			p.cmd.SetErr(err)
			continue
		}
		live = append(live, p)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		p := live[0]
		p.cmd = c.scripts.run(p.ctx, c.rdb, p.s, p.keys, p.args...)
		return
	}
	// The pipeline serves many callers: no single caller's cancellation may
	// fail it for the others (go-redis's timeouts still bound it).
	ctx := context.WithoutCancel(live[0].ctx)
	pipe := c.rdb.Pipeline()
	for _, p := range live {
		p.cmd = c.scripts.queue(ctx, pipe, p.s, p.ctx, p.keys, p.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are in the commands
	var missing []*pendingCall
	for _, p := range live {
		if isNoScript(p.cmd.Err()) {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return
	}
	pipe = c.rdb.Pipeline()
	for _, p := range missing {
		p.cmd = send(ctx, pipe, p.s.cmd(ctx, false, p.keys, p.args), p.ctx)
	}
	_, _ = pipe.Exec(ctx)
}
