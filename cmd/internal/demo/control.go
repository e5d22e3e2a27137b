package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

type atomicInt struct{ v atomic.Int64 }

func (a *atomicInt) Load() int     { return int(a.v.Load()) }
func (a *atomicInt) Store(n int)   { a.v.Store(int64(n)) }
func (a *atomicInt) Add(n int) int { return int(a.v.Add(int64(n))) }

// pauseRec is one holder the master paused while it held the lock.
type pauseRec struct {
	Worker     int
	Pid        int
	Fence      int64
	Start, End int64 // mono: SIGSTOP sent, SIGCONT sent
	Free       int64 // mono: the master first saw the lock without its fence; 0 if not while paused
}

// killRec is one holder the master kill -9ed.
type killRec struct {
	Worker     int
	Pid        int
	Fence      int64
	At         int64 // mono: SIGKILL sent
	HeldAtKill bool  // after its death the lock still carried its fence
	Free       int64 // mono: the master first saw the lock without its fence; 0 if not in time
}

// restartRec is the restart of redis-server.
type restartRec struct {
	What        string
	HolderFence int64 // the fence of the worker inside at the kill; 0 if it had left
	HeldAfter   bool  // the lock carried HolderFence once the servers answered again
	Killed      int64 // mono: kill -9 sent
	Up          int64 // mono: the new server answers
	Epoch       int64 // mono: the new epoch was set
}

// controller does to the workers and the server what the scenario asks:
// pause holders, kill holders, or restart redis-server, each at a point of
// the run's progress.
type controller struct {
	r        *runner
	sc       Scenario
	ns       string // the scenario's namespace
	keys     demoKeys
	procs    []*proc
	t0       int64
	finished func() int            // iterations finished so far
	left     func(worker int) bool // the worker has iterations left
	total    int
	pauses   int
	kills    int

	bed       testBed // failover scenarios: the lock's replicated Redis
	failovers int

	restartTries int // restart: holders that left before the kill

	mu           sync.Mutex
	pauseRecs    []pauseRec
	killRecs     []killRec
	restartRec   *restartRec
	failoverRecs []failoverRec
	errs         []string
}

func (c *controller) run(ctx context.Context) {
	switch {
	case c.sc.isFailover():
		c.runFailovers(ctx)
	case c.pauses > 0:
		// Paused workers finish their iterations: spread the pauses out.
		c.schedule(ctx, c.pauses, func(k int) float64 { return float64(k+1) / float64(c.pauses+2) }, c.pauseOne)
	case c.kills > 0:
		// Killed workers drop their remaining iterations: kill early, so
		// that others are still there to take over.
		c.schedule(ctx, c.kills, func(k int) float64 { return float64(k+1) / float64(2*c.kills+2) }, c.killOne)
	case c.sc.Restart:
		c.schedule(ctx, 1, func(int) float64 { return 1.0 / 3 }, c.restart)
	}
}

func (c *controller) errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// schedule runs act n times, the k-th once the fraction at(k) of the
// iterations have finished, so that there are always other workers left to
// take over. An act that finds no suitable holder is tried again with the
// next one.
func (c *controller) schedule(ctx context.Context, n int, at func(k int) float64, act func(context.Context) (bool, error)) {
	for k := 0; k < n; k++ {
		threshold := int(float64(c.total) * at(k))
		for c.finished() < threshold {
			if !sleepCtx(ctx, 10*time.Millisecond) {
				return
			}
		}
		for {
			ok, err := act(ctx)
			if err != nil {
				if ctx.Err() == nil {
					c.errorf("%s: %v", c.sc.Name, err)
				}
				return
			}
			if ok {
				break
			}
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// nextHolder waits for a worker to be inside with a fence greater than
// after, and returns who it is.
func (c *controller) nextHolder(ctx context.Context, after int64) (holderValue, *proc, error) {
	for {
		s, err := c.r.rdb.Get(ctx, c.keys.holder).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			if ctx.Err() != nil {
				return holderValue{}, nil, ctx.Err()
			}
		}
		if h, ok := parseHolder(s); ok && h.Fence > after && h.Worker >= 0 && h.Worker < len(c.procs) {
			p := c.procs[h.Worker]
			if p.pid == h.Pid && p.alive() && !p.killed.Load() && c.othersWaiting(p) {
				return h, p, nil
			}
		}
		if !sleepCtx(ctx, 3*time.Millisecond) {
			return holderValue{}, nil, ctx.Err()
		}
	}
}

// othersWaiting reports whether a worker other than p is still running
// with iterations left, and so will take the lock over.
func (c *controller) othersWaiting(p *proc) bool {
	for _, q := range c.procs {
		if q != p && q.alive() && !q.killed.Load() && c.left(q.id) {
			return true
		}
	}
	return false
}

// stillInside reports whether h is still published as inside and the lock
// still carries its fence.
func (c *controller) stillInside(ctx context.Context, h holderValue) bool {
	if c.r.store != nil {
		// The lock is on another store: ask each in turn.
		holder, _ := c.r.rdb.Get(ctx, c.keys.holder).Result()
		fence, _ := c.r.lockFence(ctx, c.ns, c.keys)
		return holder == h.String() && fence == strconv.FormatInt(h.Fence, 10)
	}
	pipe := c.r.rdb.Pipeline()
	holder := pipe.Get(ctx, c.keys.holder)
	fence := pipe.HGet(ctx, c.keys.lock, "fence")
	pipe.Exec(ctx)
	return holder.Val() == h.String() && fence.Val() == strconv.FormatInt(h.Fence, 10)
}

func (c *controller) lastFence() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var f int64
	for _, p := range c.pauseRecs {
		f = max(f, p.Fence)
	}
	for _, k := range c.killRecs {
		f = max(f, k.Fence)
	}
	return f
}

// pauseOne SIGSTOPs the worker inside, a third into its hold, for 2 x
// lease, and SIGCONTs it. It reports false (try again) when the worker had
// left by the time it stopped.
func (c *controller) pauseOne(ctx context.Context) (bool, error) {
	h, p, err := c.nextHolder(ctx, c.lastFence())
	if err != nil {
		return false, err
	}
	if !sleepCtx(ctx, c.sc.Hold/3) {
		return false, ctx.Err()
	}
	if !c.stillInside(ctx, h) {
		return false, nil
	}
	start := mono()
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return false, fmt.Errorf("SIGSTOP worker %d: %w", p.id, err)
	}
	resume := func() int64 {
		// Stamp first: the worker may run (and stamp its next write)
		// before the kill syscall returns here.
		at := mono()
		p.signal(syscall.SIGCONT)
		return at
	}
	waitStopped(p.pid, 200*time.Millisecond)
	if !c.stillInside(context.WithoutCancel(ctx), h) {
		resume()
		return false, nil
	}
	c.r.progress.logf("%s: paused worker %d (pid %d) holding fence %d", c.sc.Name, p.id, p.pid, h.Fence)
	free := c.watchFree(ctx, h.Fence, start+int64(c.sc.PauseFor()))
	sleepCtx(ctx, time.Duration(start+int64(c.sc.PauseFor())-mono()))
	end := resume()
	c.mu.Lock()
	c.pauseRecs = append(c.pauseRecs, pauseRec{Worker: p.id, Pid: p.pid, Fence: h.Fence, Start: start, End: end, Free: free})
	c.mu.Unlock()
	return true, ctx.Err()
}

// killOne kill -9s the worker inside, a third into its hold, and takes it
// out of the "inside" counter on its behalf.
func (c *controller) killOne(ctx context.Context) (bool, error) {
	h, p, err := c.nextHolder(ctx, c.lastFence())
	if err != nil {
		return false, err
	}
	if !sleepCtx(ctx, c.sc.Hold/3) {
		return false, ctx.Err()
	}
	if !c.stillInside(ctx, h) {
		return false, nil
	}
	p.killed.Store(true)
	at := mono()
	p.killAt.Store(at)
	if err := p.signal(syscall.SIGKILL); err != nil {
		return false, fmt.Errorf("kill -9 worker %d: %w", p.id, err)
	}
	<-p.done
	bctx := context.WithoutCancel(ctx)
	// Dead now: if the lock still carries its fence, it died holding it.
	fence, _ := c.r.lockFence(bctx, c.ns, c.keys)
	held := fence == strconv.FormatInt(h.Fence, 10)
	if _, _, err := pair(bctx, c.r.rdb, buryScript, []string{c.keys.inside, c.keys.holder}, h.String()); err != nil {
		c.errorf("taking killed worker %d out of the counter: %v", p.id, err)
	}
	c.r.progress.logf("%s: kill -9 worker %d (pid %d) holding fence %d", c.sc.Name, p.id, p.pid, h.Fence)
	var free int64
	if held {
		free = c.watchFree(ctx, h.Fence, at+int64(c.sc.Lease+2*time.Second))
	}
	c.mu.Lock()
	c.killRecs = append(c.killRecs, killRec{Worker: p.id, Pid: p.pid, Fence: h.Fence, At: at, HeldAtKill: held, Free: free})
	c.mu.Unlock()
	return held, nil
}

// restart kill -9s redis-server while a worker is inside, leaves it down a
// moment, starts it again (empty: no persistence) and begins a new epoch.
func (c *controller) restart(ctx context.Context) (bool, error) {
	h, _, err := c.nextHolder(ctx, 0)
	if err != nil {
		return false, err
	}
	if !sleepCtx(ctx, c.sc.Hold/3) {
		return false, ctx.Err()
	}
	rec := &restartRec{What: "redis-server"}
	if c.stillInside(ctx, h) {
		rec.HolderFence = h.Fence
	} else if c.restartTries++; c.restartTries < 5 {
		// The holder left already: wait for the next, so that a lock is
		// held across the restart (but do not wait for ever).
		return false, nil
	}
	rec.Killed = mono()
	if c.r.store != nil {
		// Another store: its own restart; the referee stays up, so there
		// is no new epoch to begin.
		what, err := c.r.store.Restart(ctx, c.sc.Lease)
		if err != nil {
			return false, fmt.Errorf("restarting the lock's servers: %w", err)
		}
		rec.What = what
		rec.Up = mono()
		rec.Epoch = rec.Up
		rec.HeldAfter = c.heldAfter(ctx, rec.HolderFence)
		c.r.progress.logf("%s: %s restarted after %v", c.sc.Name, what, time.Duration(rec.Up-rec.Killed).Round(time.Millisecond))
		c.mu.Lock()
		c.restartRec = rec
		c.mu.Unlock()
		return true, nil
	}
	if err := c.r.srv.Kill(); err != nil {
		return false, fmt.Errorf("kill -9 redis-server: %w", err)
	}
	c.r.progress.logf("%s: kill -9 redis-server", c.sc.Name)
	time.Sleep(250 * time.Millisecond)
	if err := c.r.srv.Restart(); err != nil {
		return false, fmt.Errorf("restarting redis-server: %w", err)
	}
	rec.Up = mono()
	bctx := context.WithoutCancel(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.r.rdb.Set(bctx, c.keys.epoch, "2", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("setting the epoch after the restart: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rec.Epoch = mono()
	rec.HeldAfter = c.heldAfter(ctx, rec.HolderFence)
	c.r.progress.logf("%s: redis-server restarted after %v", c.sc.Name, time.Duration(rec.Up-rec.Killed).Round(time.Millisecond))
	c.mu.Lock()
	c.restartRec = rec
	c.mu.Unlock()
	return true, nil
}

// heldAfter reports whether the lock, once the restarted servers answer,
// still carries fence (the holder's at the kill): the restart kept it.
func (c *controller) heldAfter(ctx context.Context, fence int64) bool {
	if fence == 0 {
		return false
	}
	want := strconv.FormatInt(fence, 10)
	deadline := time.Now().Add(10 * time.Second)
	for {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		v, err := c.r.lockFence(qctx, c.ns, c.keys)
		cancel()
		if err == nil || errors.Is(err, redis.Nil) || time.Now().After(deadline) {
			return v == want
		}
		time.Sleep(20 * time.Millisecond) // not answering yet
	}
}

// watchFree polls the lock every millisecond until it no longer carries
// fence (it expired, or someone else has it) and returns when that was
// first seen, or 0 if not before the mono time until.
func (c *controller) watchFree(ctx context.Context, fence int64, until int64) int64 {
	want := strconv.FormatInt(fence, 10)
	for mono() < until {
		qctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		v, err := c.r.lockFence(qctx, c.ns, c.keys)
		cancel()
		if (err == nil && v != want) || errors.Is(err, redis.Nil) {
			return mono()
		}
		if !sleepCtx(ctx, time.Millisecond) {
			return 0
		}
	}
	return 0
}

// waitStopped waits until the process is in the stopped state (Linux
// /proc), or d passes.
func waitStopped(pid int, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			time.Sleep(10 * time.Millisecond) // no /proc: give the signal a moment
			return
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 && (s[i+2] == 'T' || s[i+2] == 't') {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// sleepCtx sleeps d, or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
