package lockmodel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// The operations other than the plain acquires (machine.go), and what
// the model records of their outcomes.

// semaphore starts an acquire of a permit.
func (m *machine) semaphore(s Step) {
	cl := m.clientAt(s.Client)
	r := resource{FamSem, semName}
	ctx, _ := ownerCtx(context.Background(), s) // permits ignore the owner
	opts, renew := m.options(s, s.TTL, 0)
	c := m.newCall(cl, fmt.Sprintf("Semaphore.%s ttl %v %s", tryName(s.Try, "Acquire"), s.TTL, s.describeOptions()), r, ctx)
	m.holdCall(c, s, renew)
	c.via = "permit"
	if s.Try {
		c.predictFree = m.knownFree(cl, r)
	}
	sem := cl.c.Semaphore(semName, m.tg.Permits)
	acquire := sem.Acquire
	if s.Try {
		acquire = sem.TryAcquire
	}
	ttl := s.TTL
	m.run(c, func(ctx context.Context) outcome {
		lk, err := acquire(ctx, ttl, opts...)
		return outcome{lk: lk, err: err}
	})
}

// rwlock starts an acquire of a read or write hold.
func (m *machine) rwlock(s Step) {
	cl := m.clientAt(s.Client)
	r := resource{FamRW, rwName}
	ctx, _ := ownerCtx(context.Background(), s)
	opts, renew := m.options(s, s.TTL, 0)
	mode := "Read"
	if s.Write {
		mode = "Write"
	}
	c := m.newCall(cl, fmt.Sprintf("RWLock.%s ttl %v %s", tryName(s.Try, "Acquire"+mode), s.TTL, s.describeOptions()), r, ctx)
	m.holdCall(c, s, renew)
	c.write, c.via = s.Write, strings.ToLower(mode)
	rw := cl.c.RWLock(rwName)
	var acquire func(context.Context, time.Duration, ...fencelock.AcquireOption) (*fencelock.Lock, error)
	switch {
	case s.Write && s.Try:
		acquire = rw.TryAcquireWrite
	case s.Write:
		acquire = rw.AcquireWrite
	case s.Try:
		acquire = rw.TryAcquireRead
	default:
		acquire = rw.AcquireRead
	}
	ttl := s.TTL
	m.run(c, func(ctx context.Context) outcome {
		lk, err := acquire(ctx, ttl, opts...)
		return outcome{lk: lk, err: err}
	})
}

func tryName(try bool, name string) string {
	if try {
		return "Try" + name
	}
	return name
}

// holdCall sets up c, an acquire of a permit or a read-write hold.
func (m *machine) holdCall(c *call, s Step, renew time.Duration) {
	c.quick = s.Try
	c.waiting = !s.Try && !(s.HasWait && s.Wait == 0)
	if s.HasWait {
		c.until = c.start.Add(s.Wait)
	}
	c.ttl, c.renew = s.TTL, renew
	c.onDone = func(c *call, o outcome) {
		m.expectErr(c, o.err, fencelock.ErrNotAcquired, fencelock.ErrUnavailable, fencelock.ErrClosed)
		if o.lk != nil {
			m.register(c, o.lk, c.via, c.ttl, c.renew, o.at)
		} else if c.predictFree && o.err != nil {
			m.fail("%s found a permit free (no fault), but failed: %v", c.what, o.err)
		}
	}
}

// runJob starts a RunJob of the current tick (or the previous one).
func (m *machine) runJob(s Step) {
	cl := m.clientAt(s.Client)
	job := m.tg.Job
	scheduled := time.Now()
	if s.Scheduled == 1 {
		scheduled = scheduled.Add(-job.Period)
	}
	tick := scheduled
	if job.Period > 0 {
		tick = scheduled.Truncate(job.Period)
	}
	owner := fmt.Sprintf("%s%s@%s", "job:", job.Name, tick.UTC().Format(time.RFC3339Nano))
	c := m.newCall(cl, fmt.Sprintf("RunJob tick %v", m.since(tick)), resource{FamLock, jobKey}, context.Background())
	c.owner, c.waiting = owner, true
	if job.Period > 0 {
		c.until = tick.Add(job.Period)
	}
	fn := &fnRun{c: c, tick: owner, finish: make(chan struct{})}
	c.fn, c.via, c.ttl = fn, "job", job.LockAtMost
	c.entered = make(chan began, 1)
	c.onDone = func(c *call, o outcome) {
		m.expectErr(c, o.err, fencelock.ErrNotAcquired, fencelock.ErrUnavailable, fencelock.ErrClosed, fencelock.ErrLost)
		if o.ran != (fn.h != nil) {
			m.fail("%s reported ran=%v, but its fn began: %v", c.what, o.ran, fn.h != nil)
		}
	}
	m.run(c, func(ctx context.Context) outcome {
		ran, err := cl.c.RunJob(ctx, job, scheduled, func(fctx context.Context, run *fencelock.Lock) error {
			c.entered <- began{run, time.Now()}
			select {
			case <-fn.finish:
			case <-fctx.Done():
			}
			return nil
		})
		return outcome{ran: ran, err: err}
	})
}

// campaign starts a Campaign with a candidate id of its own.
func (m *machine) campaign(s Step) {
	cl := m.clientAt(s.Client)
	m.candidates++
	id := fmt.Sprintf("%s-cand%d", cl.name, m.candidates)
	opts, renew := m.options(s, s.TTL, s.TTL/3)
	c := m.newCall(cl, fmt.Sprintf("Campaign %s ttl %v %s", id, s.TTL, s.describeOptions()), resource{FamLock, electionKey}, context.Background())
	c.owner, c.waiting = id, !(s.HasWait && s.Wait == 0)
	if s.HasWait {
		c.until = c.start.Add(s.Wait)
	}
	ttl := s.TTL
	c.onDone = func(c *call, o outcome) {
		m.expectErr(c, o.err, fencelock.ErrNotAcquired, fencelock.ErrUnavailable, fencelock.ErrClosed)
		if o.ld != nil {
			h := m.register(c, o.ld.Lock(), "leader", ttl, renew, o.at)
			m.leaders = append(m.leaders, &leader{ld: o.ld, h: h})
		}
	}
	m.run(c, func(ctx context.Context) outcome {
		ld, err := cl.c.Campaign(ctx, electionName, id, ttl, opts...)
		return outcome{ld: ld, err: err}
	})
}

// pick returns the item of list that p names, the most recent first.
func pick[T any](list []T, p int) (T, bool) {
	var zero T
	if len(list) == 0 {
		return zero, false
	}
	return list[len(list)-1-p%len(list)], true
}

// resign resigns a leadership.
func (m *machine) resign(s Step) {
	var live []*leader
	for _, l := range m.leaders {
		if !l.resigned {
			live = append(live, l)
		}
	}
	l, ok := pick(live, s.Pick)
	if !ok {
		return
	}
	l.resigned, l.h.released = true, true
	c := m.newCall(l.h.cl, "Resign "+l.h.String(), l.h.r, context.Background())
	c.quick = true
	predict := m.sureHeld(l.h)
	c.onDone = func(c *call, o outcome) {
		m.expectErr(c, o.err, fencelock.ErrNotHeld, fencelock.ErrUnavailable, fencelock.ErrClosed)
		m.releasedBy(c, o, predict)
	}
	m.run(c, func(ctx context.Context) outcome { return outcome{err: l.ld.Resign(ctx)} })
}

// releasedBy takes in a release c made of a lock the model knew its holder
// held (predict): it must have worked, and its waiters must get the lock
// at once.
func (m *machine) releasedBy(c *call, o outcome, predict bool) {
	if o.err == nil {
		c.ok = true
		m.released = append(m.released, c)
	} else if predict {
		m.fail("%s failed, though its holder held the lock (no fault): %v", c.what, o.err)
	}
}

// holdable are the locks the model may release, refresh or ask the TTL
// of: not released yet, and not a job's run (which RunJob ends).
func (m *machine) holdable(plainOnly, acquiredOnly bool) []*holding {
	var list []*holding
	for _, h := range m.holdings {
		switch {
		case h.released, h.jobRun(), plainOnly && !h.isPlain():
		case acquiredOnly && (h.fn != nil || h.via == "leader"):
		default:
			list = append(list, h)
		}
	}
	return list
}

// release releases a lock (not Do's, a run's or a leadership).
func (m *machine) release(s Step) {
	h, ok := pick(m.holdable(false, true), s.Pick)
	if !ok {
		return
	}
	h.released = true
	m.shorten(h)
	c := m.newCall(h.cl, "Release "+h.String(), h.r, context.Background())
	c.quick = true
	predict := m.sureHeld(h)
	c.onDone = func(c *call, o outcome) {
		m.expectErr(c, o.err, fencelock.ErrNotHeld, fencelock.ErrUnavailable, fencelock.ErrClosed)
		m.releasedBy(c, o, predict)
	}
	m.run(c, func(ctx context.Context) outcome { return outcome{err: h.lk.Release(ctx)} })
}

// shorten notes that h's release may shorten its lock's lease: a job's
// run is kept only to LockAtLeast, and a re-entrant owner's other holds
// may end sooner than h's.
func (m *machine) shorten(h *holding) {
	if h.jobRun() || h.owner != h.token {
		m.shortened[h.r] = time.Now()
	}
}

// sureHeld reports whether, in virtual time and with no fault, h's holder
// holds its lock: a release, a Refresh, a TTL of it must work.
func (m *machine) sureHeld(h *holding) bool {
	return m.virtual && m.clientQuiet(h.cl, time.Now()) && m.believes(h)
}

// localLease is the part of a lease of ttl the Client counts as held.
func localLease(ttl time.Duration) time.Duration {
	return ttl - time.Duration(float64(ttl)*safetyMargin)
}

// refresh refreshes a lock to a new lease.
func (m *machine) refresh(s Step) {
	h, ok := pick(m.holdable(false, false), s.Pick)
	if !ok {
		return
	}
	ttl := s.TTL
	if h.renew > 0 && localLease(ttl) <= h.renew {
		ttl = h.ttl // a valid one: shorter would leave no room for the renewals
	}
	h.maxTTL = max(h.maxTTL, ttl) // it may be applied, whatever the reply
	m.shortened[h.r] = time.Now()
	c := m.newCall(h.cl, fmt.Sprintf("Refresh %v %s", ttl, h), h.r, context.Background())
	c.quick = true
	predict := m.sureHeld(h)
	c.onDone = func(c *call, o outcome) {
		m.expectErr(c, o.err, fencelock.ErrNotHeld, fencelock.ErrUnavailable, fencelock.ErrClosed)
		switch {
		case o.err == nil:
			h.ttl = ttl
		case predict:
			m.fail("%s failed, though its holder held the lock (no fault): %v", c.what, o.err)
		}
	}
	m.run(c, func(ctx context.Context) outcome { return outcome{err: h.lk.Refresh(ctx, ttl)} })
}

// ttl asks the store for a lock's remaining lease.
func (m *machine) ttl(s Step) {
	h, ok := pick(m.holdable(false, false), s.Pick)
	if !ok {
		return
	}
	c := m.newCall(h.cl, "TTL "+h.String(), h.r, context.Background())
	c.quick = true
	predict := m.sureHeld(h)
	c.onDone = func(c *call, o outcome) {
		m.expectErr(c, o.err, fencelock.ErrNotHeld, fencelock.ErrUnavailable, fencelock.ErrClosed)
		switch {
		case o.err != nil && predict:
			m.fail("%s failed, though its holder held the lock (no fault): %v", c.what, o.err)
		case o.err == nil && predict && m.virtual && time.Now().Add(o.ttl).Before(h.lk.Deadline()):
			m.fail("%s: the store's lease (%v left) ends before the holder's local deadline (%v left)",
				c.what, o.ttl, time.Until(h.lk.Deadline()))
		}
	}
	m.run(c, func(ctx context.Context) outcome {
		d, err := h.lk.TTL(ctx)
		return outcome{ttl: d, err: err}
	})
}

// releaseToken releases a plain lock's hold by its token, from a worker
// (maybe the holder's own Client) or the operator.
func (m *machine) releaseToken(s Step) {
	var plain []*holding
	for _, h := range m.holdings {
		if h.isPlain() {
			plain = append(plain, h)
		}
	}
	h, ok := pick(plain, s.Pick)
	if !ok {
		return
	}
	issuer := m.clientAt(s.Client)
	m.shorten(h)
	c := m.newCall(issuer, "ReleaseToken "+h.String(), h.r, context.Background())
	c.quick, c.token = true, h.token
	m.forces[h.r] = append(m.forces[h.r], c)
	predict := m.sureHeld(h) && !issuer.closing && m.clientQuiet(issuer, time.Now())
	c.onDone = func(c *call, o outcome) {
		m.expectErr(c, o.err, fencelock.ErrNotHeld, fencelock.ErrUnavailable, fencelock.ErrClosed)
		if o.err == nil {
			m.markForced(h, c)
		}
		m.releasedBy(c, o, predict)
	}
	key, token := h.r.key, h.token
	m.run(c, func(ctx context.Context) outcome {
		n, err := issuer.c.ReleaseToken(ctx, key, token)
		return outcome{n: n, err: err}
	})
}

// forceRelease frees a name, every kind of hold of it, from a worker or the
// operator.
func (m *machine) forceRelease(s Step) {
	r := m.resources[s.Key%len(m.resources)]
	key := r.key
	issuer := m.clientAt(s.Client)
	c := m.newCall(issuer, "ForceRelease "+key, r, context.Background())
	c.quick = true
	m.forces[r] = append(m.forces[r], c)
	c.onDone = func(c *call, o outcome) {
		m.expectErr(c, o.err, fencelock.ErrUnavailable, fencelock.ErrNotAcquired, fencelock.ErrClosed)
		if o.err != nil {
			return
		}
		before := o.info
		c.before = &before
		if !before.AnyHeld() {
			return
		}
		for _, h := range m.holdings {
			if h.r == r && sawHold(before, h) {
				m.markForced(h, c)
			}
		}
		m.releasedBy(c, o, false)
	}
	m.run(c, func(ctx context.Context) outcome {
		info, err := issuer.c.ForceRelease(ctx, key, "lockmodel")
		return outcome{info: info, err: err}
	})
}

func holdsToken(info fencelock.LockInfo, token string) bool {
	return slices.ContainsFunc(info.Holds, func(h driver.HoldInfo) bool { return h.Token == token })
}

// sawHold reports whether a ForceRelease that found before at its start
// may release h: the plain lock's holder it saw (its fence: re-entries it
// took meanwhile go too), or a permit or read or write hold it listed.
func sawHold(before fencelock.LockInfo, h *holding) bool {
	if h.r.fam == FamLock {
		return before.Held && (h.fence == before.Fence || holdsToken(before, h.token))
	}
	return slices.ContainsFunc(before.Others, func(x driver.HoldInfo) bool { return x.Token == h.token })
}

// markForced records that c released h's hold by its token or by force:
// its holder is told at once by its own Client, and by another within its
// renewal interval.
func (m *machine) markForced(h *holding, c *call) {
	if h.forced() {
		return
	}
	h.forcedAt, h.forcedBy, h.forcer = time.Now(), c.cl, c
	if h.id > c.id {
		// The model saw it returned only after c began: its Client may
		// have had no Lock of it yet when c released it (a reply or a
		// hand-off in flight), so it is told at its next renewal, as a
		// holder of another Client is.
		h.forcedUnseen = true
	}
	m.stats["forced"]++
	m.note("%s released by %s", h, c.what)
}

// finish lets a running fn (Do, RunJob) return.
func (m *machine) finish(s Step) {
	var running []*fnRun
	for _, fn := range m.fns {
		if fn.finished.IsZero() {
			running = append(running, fn)
		}
	}
	fn, ok := pick(running, s.Pick)
	if !ok {
		return
	}
	close(fn.finish)
	fn.finished = time.Now()
	fn.h.released = true
	m.shorten(fn.h)
	fn.c.quick = true
	m.note("fn of %s returns", fn.c.what)
}

// cancelCall cancels the context of a call that waits for a lock.
func (m *machine) cancelCall(s Step) {
	var waiting []*call
	for _, c := range m.calls {
		if c.waiting && !c.cancelled {
			waiting = append(waiting, c)
		}
	}
	c, ok := pick(waiting, s.Pick)
	if !ok {
		return
	}
	c.cancelled = true
	c.cancel()
	c.quick = true
	m.note("cancelled %s", c.what)
}

// closeClient closes a worker Client.
func (m *machine) closeClient(s Step) {
	cl := m.clients[s.Client%len(m.clients)]
	if cl.closing {
		return
	}
	m.startClose(cl)
}

func (m *machine) startClose(cl *client) {
	cl.closing, cl.closeStart = true, time.Now()
	for _, h := range m.holdings {
		if h.cl == cl {
			m.shorten(h)
		}
	}
	c := m.newCall(cl, "Close", resource{}, context.Background())
	c.quick = true
	quiet := m.clientQuiet(cl, time.Now())
	c.onDone = func(c *call, o outcome) {
		cl.closed, cl.closedAt = true, time.Now()
		if errors.Is(o.err, fencelock.ErrInvalidArgument) {
			m.expectErr(c, o.err)
		}
		if o.err != nil && m.virtual && quiet && m.clientQuiet(cl, time.Now()) && !m.failed {
			m.fail("Close of %s failed with no fault: %v", cl.name, o.err)
		}
		m.released = append(m.released, c)
	}
	m.run(c, func(context.Context) outcome { return outcome{err: cl.c.Close()} })
}

// open puts a new Client in a slot whose Client is closed.
func (m *machine) open(s Step) {
	slot := s.Client % len(m.clients)
	cl := m.clients[slot]
	if !cl.closed {
		return
	}
	gen := 1
	if i := strings.IndexByte(cl.name, 'g'); i >= 0 {
		fmt.Sscan(cl.name[i+1:], &gen)
		gen++
	}
	m.clients[slot] = m.newClient(slot, fmt.Sprintf("c%dg%d", slot, gen))
	m.note("opened %s", m.clients[slot].name)
}

// inject starts a fault of the store for s.Dur.
func (m *machine) inject(s Step) {
	if m.faulter == nil {
		return
	}
	now := time.Now()
	f := &activeFault{f: s.Fault, until: now.Add(s.Dur), clear: m.faulter.Inject(s.Fault)}
	m.faults = append(m.faults, f)
	lag := time.Duration(0)
	switch s.Fault.Kind {
	case FaultRequestDelay, FaultReplyDelay:
		lag = s.Fault.Delay
	case FaultPause:
		lag = s.Dur
	}
	m.maxLag = max(m.maxLag, lag)
	// After the fault: requests held back land, waiters that failed back
	// off for up to a fallback poll, and releases retried in the
	// background back off as long.
	m.quietSince = latest(m.quietSince, f.until.Add(lag+fallbackPoll+exactSlack))
}

// partition cuts a worker Client off from the store for s.Dur.
func (m *machine) partition(s Step) {
	cl := m.clients[s.Client%len(m.clients)]
	if cl.cut == nil || cl.closing {
		return
	}
	now := time.Now()
	cl.cut.Cut(true)
	cl.cutUntil = latest(cl.cutUntil, now.Add(s.Dur))
	// Afterwards its waiters and its background releases back off for up
	// to a fallback poll.
	// (In real time, the connections stuck on requests that were lost
	// time out too.)
	cl.quietSince = latest(cl.quietSince, cl.cutUntil.Add(fallbackPoll+exactSlack+m.tg.Tolerance))
	m.note("%s cut off until %v", cl.name, m.since(cl.cutUntil))
}

// clearFaults ends the faults and partitions whose time is up (all of them
// with all).
func (m *machine) clearFaults(all bool) {
	now := time.Now()
	for _, cl := range append(slices.Clone(m.clients), m.operator) {
		if cl.cut != nil && !cl.cutUntil.IsZero() && (all || !now.Before(cl.cutUntil)) {
			cl.cut.Cut(false)
			if all {
				cl.cutUntil = now
			}
		}
	}
	m.faults = slices.DeleteFunc(m.faults, func(f *activeFault) bool {
		if all || !now.Before(f.until) {
			f.clear()
			return true
		}
		return false
	})
}

// quiet reports whether no fault has effects at now.
func (m *machine) quiet(now time.Time) bool {
	return len(m.faults) == 0 && !now.Before(m.quietSince)
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// knownFree reports whether, in virtual time and with no fault, the store
// has room for one more hold of r by cl: a single attempt must get it.
func (m *machine) knownFree(cl *client, r resource) bool {
	if !m.virtual || cl.closing || !m.clientQuiet(cl, time.Now()) {
		return false
	}
	v, ok := m.store.View(r.fam, r.key)
	if !ok {
		return false
	}
	switch r.fam {
	case FamLock:
		return len(v.Holds) == 0
	case FamSem:
		return len(v.Holds) < m.tg.Permits
	}
	return false
}

// expectErr checks that err is nil or matches one of allowed, and never
// ErrInvalidArgument.
func (m *machine) expectErr(c *call, err error, allowed ...error) {
	m.t.Helper()
	if err == nil || m.failed {
		return
	}
	if errors.Is(err, fencelock.ErrInvalidArgument) {
		m.fail("%s: a valid call got an error matching ErrInvalidArgument: %v", c.what, err)
		return
	}
	if c.cancelled && errors.Is(err, context.Canceled) {
		return // the caller's context, which the model cancelled, ended it
	}
	for _, a := range allowed {
		if errors.Is(err, a) {
			return
		}
	}
	m.fail("%s: an error of no documented kind (%v): %v", c.what, allowed, err)
}

// entered takes in a Do's or RunJob's fn that began.
func (m *machine) entered(c *call, b began) {
	h := m.register(c, b.lk, c.via, c.ttl, c.renew, b.at)
	c.fn.h, c.waiting = h, false
	h.fn = c.fn
	c.fn.start = h.at
	m.fns = append(m.fns, c.fn)
	if c.via == "job" {
		m.checkJobRun(c.fn)
	}
}

// register takes in a lock returned to a caller, and checks its fence.
// at is when it was returned (or fn began).
func (m *machine) register(c *call, lk *fencelock.Lock, via string, ttl, renew time.Duration, at time.Time) *holding {
	m.nextID++
	h := &holding{id: m.nextID, lk: lk, cl: c.cl, r: c.r, write: c.write, owner: c.owner, fence: lk.Fence(),
		token: lk.Token(), via: via, start: c.start, at: at, ttl: ttl, maxTTL: ttl, renew: renew}
	if h.owner == "" || h.r.fam != FamLock {
		h.owner = h.token // nothing re-enters it
	}
	// The request that took it was sent no later than its local lease
	// (with no WithMaxHold) says.
	h.sent = lk.Deadline().Add(-localLease(ttl))
	h.ctx, h.stop = lk.Context(context.Background())
	m.holdings = append(m.holdings, h)
	m.byToken[h.token] = h
	m.note("%s holds %s", c.what, h)
	m.checkFence(c, h)
	return h
}

// checkFence checks that a new acquisition's fence is above every fence
// returned for the lock before its call began, and new; a re-entry keeps
// its owner's fence.
func (m *machine) checkFence(c *call, h *holding) {
	owners := m.fenceOwner[h.r]
	if owners == nil {
		owners = map[int64]string{}
		m.fenceOwner[h.r] = owners
	}
	prev, seen := owners[h.fence]
	switch {
	case h.fence <= 0:
		m.fail("%s: fence %d, not positive", c.what, h.fence)
	case h.r.fam == FamLock && (h.lk.Holds() > 1 || (seen && prev == h.owner)):
		// A re-entry keeps the owner's fence. (With one hold: its
		// request re-entered, was retried after a late reply, and the
		// owner's other holds had lapsed meanwhile.)
		if seen && prev != h.owner {
			m.fail("%s re-entered with fence %d, which is %s's", c.what, h.fence, prev)
		}
	case seen:
		m.fail("%s got fence %d, already returned to %s", c.what, h.fence, prev)
	case h.fence <= c.floor:
		m.fail("%s got fence %d, not above %d, returned before the call began", c.what, h.fence, c.floor)
	}
	owners[h.fence] = h.owner
	m.maxFence[h.r] = max(m.maxFence[h.r], h.fence)
}

// checkJobRun checks that no other run of fn's tick began, on any Client.
func (m *machine) checkJobRun(fn *fnRun) {
	for _, e := range m.jobRuns[fn.tick] {
		m.fail("tick %s ran twice: by %s at %v and by %s at %v", fn.tick, e.c.what, m.since(e.start), fn.c.what, m.since(fn.start))
	}
	m.jobRuns[fn.tick] = append(m.jobRuns[fn.tick], fn)
}

// teardown ends the check: faults cleared, fns finished, waits cancelled,
// every Client closed; then every hold must lapse by its lease end.
func (m *machine) teardown() {
	p := recover()
	tdStart := time.Now()
	defer func() {
		if os.Getenv("LOCKMODEL_STATS") != "" {
			fmt.Fprintf(os.Stderr, "teardown %v, check %v\n", time.Since(tdStart), time.Since(m.start))
		}
	}()
	if os.Getenv("LOCKMODEL_STATS") != "" {
		counts := map[Op]int{}
		for _, s := range m.steps {
			counts[s.Op]++
		}
		if os.Getenv("LOCKMODEL_STATS") == "trace" {
			fmt.Fprintln(os.Stderr, strings.Join(m.events, "\n"))
		}
		fmt.Fprintf(os.Stderr, "check: %d steps, %v virtual, %d holdings, ops %v panic %v stats %v\n", len(m.steps), time.Since(m.start), len(m.holdings), counts, p, m.stats)
	}
	failing := p != nil || m.failed || m.t.Failed()
	m.failed = m.failed || failing
	m.clearFaults(true)
	for _, fn := range m.fns {
		if fn.finished.IsZero() {
			close(fn.finish)
			fn.finished = time.Now()
		}
	}
	for _, c := range m.calls {
		c.cancelled = true
		c.cancel()
		c.quick = true
	}
	for _, cl := range append(slices.Clone(m.clients), m.operator) {
		if !cl.closing {
			m.startClose(cl)
		}
	}
	// Let (virtual) time pass until every call has returned: Close, for
	// one, retries releases on timers.
	for _, c := range slices.Clone(m.calls) {
		m.await(c, time.Minute)
	}
	m.harvest()
	if !m.failed {
		m.check()
		for _, c := range m.calls {
			m.fail("%s is still in flight after every Client was closed", c.what)
		}
		for _, h := range m.holdings {
			if h.ctx.Err() == nil {
				m.fail("%s is not told of its end after its Client was closed", h)
			}
		}
		m.checkLapsed()
	}
	for _, h := range m.holdings {
		h.stop()
	}
	m.store.Close()
	if p != nil {
		panic(p)
	}
}

// checkLapsed checks that every hold left on the store, no Client owning
// it, is gone by its lease end.
func (m *machine) checkLapsed() {
	longest := m.tg.Job.LockAtMost
	for _, ttl := range m.tg.TTLs {
		longest = max(longest, ttl)
	}
	bound := longest + m.maxLag + driver.PlaceLease + exactSlack
	if m.virtual {
		time.Sleep(bound)
		synctest.Wait()
	}
	deadline := time.Now().Add(bound + m.tg.Tolerance)
	for _, r := range m.resources {
		for {
			v, ok := m.store.View(r.fam, r.key)
			if !ok || len(v.Holds) == 0 {
				break
			}
			if m.virtual || time.Now().After(deadline) {
				m.fail("%s still has holds %v after every Client was closed and the longest lease passed", r, v.Holds)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
