package redisbackend

import (
	"context"
	"sync"
)

// coalescer sends script calls made at the same time by many goroutines in
// shared pipelines: one write and one read for the whole group, on the client
// and on the server. A call made while fewer than maxFlushers groups are in
// flight is sent at once, alone, so a lone caller pays no delay; calls made
// while the pipe is full queue up, and the next free sender takes them all.
// No goroutine of its own: callers take turns sending.
type coalescer struct {
	tr          Transport
	scripts     *scriptCache
	maxFlushers int

	mu       sync.Mutex
	queue    []*pendingCall
	flushers int // calls in flight, up to maxFlushers
}

// pendingCall is one queued script call. They are reused (pendingCalls):
// at 64 goroutines most calls queue, and a new pendingCall with its channel
// would be a tenth of the bytes an acquire and release allocate.
type pendingCall struct {
	ctx  context.Context
	s    script
	keys []string
	args []any

	reply Reply
	// wake gets one signal per call: its reply is in, or (lead set) its
	// goroutine must send batch, the queue handed over (this call first).
	// Buffered, so that the goroutine signalling never waits.
	wake  chan struct{}
	lead  bool
	batch []*pendingCall
}

// pendingCalls holds pendingCalls, each with its wake channel, for reuse.
var pendingCalls = sync.Pool{New: func() any { return &pendingCall{wake: make(chan struct{}, 1)} }}

// run runs one script call, possibly in a pipeline with others.
func (c *coalescer) run(ctx context.Context, s script, keys []string, args ...any) Reply {
	c.mu.Lock()
	if c.flushers < c.maxFlushers {
		// Alone: no pendingCall to make, nobody waits on this call.
		c.flushers++
		c.mu.Unlock()
		var r Reply
		if err := ctx.Err(); err != nil {
			r.Err = err
		} else {
			r = c.scripts.run(ctx, c.tr, s, keys, args...)
		}
		c.passTurn()
		return r
	}
	p := pendingCalls.Get().(*pendingCall)
	p.ctx, p.s, p.keys, p.args = ctx, s, keys, args
	c.queue = append(c.queue, p)
	c.mu.Unlock()

	<-p.wake
	if p.lead {
		// It is our turn to send what had queued up (our call first).
		c.send(p.batch)
	}
	r := p.reply
	*p = pendingCall{wake: p.wake} // nothing of this call stays reachable
	pendingCalls.Put(p)
	return r
}

// send sends batch, whose first call is the caller's, then hands the
// sending turn to the first queued call, or gives it up. Once woken, a call
// of batch is its goroutine's again: send touches it no more.
func (c *coalescer) send(batch []*pendingCall) {
	c.exec(batch)
	for _, p := range batch[1:] {
		p.wake <- struct{}{}
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
		next.lead = true
		next.wake <- struct{}{}
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
			p.reply = Reply{Err: err}
			continue
		}
		live = append(live, p)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		p := live[0]
		p.reply = c.scripts.run(p.ctx, c.tr, p.s, p.keys, p.args...)
		return
	}
	// The pipeline serves many callers: no single caller's cancellation may
	// fail it for the others (the transport's timeouts still bound it).
	ctx := context.WithoutCancel(live[0].ctx)
	cmds := make([]Command, len(live))
	for i, p := range live {
		cmds[i] = c.scripts.queue(p.s, p.keys, p.args, trackerFrom(p.ctx))
	}
	var missing []*pendingCall
	var again []Command
	for i, r := range c.tr.Do(ctx, cmds) {
		p := live[i]
		p.reply = r
		if isNoScript(r.Err) {
			missing = append(missing, p)
			again = append(again, p.s.cmd(false, p.keys, p.args, trackerFrom(p.ctx)))
		}
	}
	if len(missing) == 0 {
		return
	}
	for i, r := range c.tr.Do(ctx, again) {
		missing[i].reply = r
	}
}
