package lockmodel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
)

// The locks the machine uses.
const (
	semName      = "pool"
	rwName       = "doc"
	jobName      = "nightly"
	electionName = "leader"
	jobKey       = "job:" + jobName           // RunJob's lock key
	electionKey  = "election:" + electionName // Campaign's lock key

	// safetyMargin is the Client's default WithSafetyMargin: the fraction
	// of each lease its local deadline ends early.
	safetyMargin = 0.1
)

var (
	plainKeys = []string{"a", "b"}
	forceKeys = []string{"a", "b", jobKey, electionKey}
)

// resource is one lock on the store: a family and a key.
type resource struct {
	fam Family
	key string
}

func (r resource) String() string { return r.fam.String() + " " + r.key }

// machine runs the steps of one check and keeps the model.
type machine struct {
	t       TB
	tg      *Target
	opTable []Op
	store   Store
	faulter Faulter
	virtual bool
	start   time.Time

	clients  []*client // the worker slots
	operator *client   // never closed: ReleaseToken and ForceRelease from another process

	calls    []*call    // not yet finished
	holdings []*holding // every lock returned to a caller, in order
	byToken  map[string]*holding
	leaders  []*leader
	fns      []*fnRun // running (Do, RunJob), in order
	jobRuns  map[string][]*fnRun
	forces   map[resource][]*call // ReleaseToken and ForceRelease calls, by lock

	resources   []resource
	maxFence    map[resource]int64
	fenceOwner  map[resource]map[int64]string
	lastCounter map[resource]int64
	lastCallEnd map[string]time.Time // by client name and resource
	// shortened is when a lock's lease last ended sooner than a waiter
	// may have been told (a Refresh, a job's run kept to LockAtLeast, a
	// release leaving a re-entrant owner's other holds): a waiter's
	// fallback timer, cut at the lease it was told of, may then be late.
	shortened map[resource]time.Time

	faults     []*activeFault
	quietSince time.Time     // no fault has effects from then on
	maxLag     time.Duration // the longest a request may have been held back
	released   []*call       // release calls finished in this step, for the at-once check

	stats      map[string]int // what the checks saw, for LOCKMODEL_STATS
	nextID     int
	candidates int
	steps      []Step
	events     []string // recent, for the failure report
	failed     bool
}

// client is one Client, in a slot.
type client struct {
	slot       int // -1: the operator
	name       string
	c          *fencelock.Client
	closing    bool // Close was called
	closeStart time.Time
	closed     bool // Close returned
	closedAt   time.Time

	cut        Partitioner // nil when the store cannot cut it off
	cutUntil   time.Time   // cut off from the store until then (OpPartition)
	quietSince time.Time   // no partition has effects on it from then on
}

// clientQuiet reports whether no fault of the store, and no partition of
// cl, has effects at now.
func (m *machine) clientQuiet(cl *client, now time.Time) bool {
	return m.quiet(now) && !now.Before(cl.quietSince) && !now.Before(cl.cutUntil)
}

// call is one call in flight, on a goroutine of its own.
type call struct {
	id      int
	what    string
	cl      *client
	r       resource
	write   bool   // a read-write lock's write hold
	owner   string // WithOwner, the candidate id, the job's tick
	fair    bool
	waiting bool // waits for the lock: a waiter the liveness check looks at
	quick   bool // returns at once (in real time, the step waits for it)
	start   time.Time
	end     time.Time // when it returned (zero while in flight)
	until   time.Time // WithWait's end (zero: none)
	floor   int64     // the largest fence returned for r when the call began
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan outcome
	entered chan began // Do and RunJob: fn began
	fn      *fnRun
	via     string        // what the lock it returns is registered as
	ttl     time.Duration // the lease it asks for
	renew   time.Duration // the renewal interval of the lock it returns
	onDone  func(c *call, o outcome)

	faulty        bool // a fault had effects when it began
	cancelled     bool
	predictFree   bool // TryAcquire of a lock the model knows is free: must acquire
	eligibleSince time.Time
	token         string              // ReleaseToken: the token it releases
	before        *fencelock.LockInfo // ForceRelease: the state it returned
	ok            bool                // a release that released something
}

// began is a Do's or RunJob's fn that began with lk at at.
type began struct {
	lk *fencelock.Lock
	at time.Time
}

// outcome is what a call returned.
type outcome struct {
	lk   *fencelock.Lock
	ld   *fencelock.Leadership
	ran  bool
	err  error
	ttl  time.Duration
	info fencelock.LockInfo
	n    int
	at   time.Time // when the call returned
}

// holding is a lock (a permit, a read or write hold, a leadership, a run)
// returned to a caller.
type holding struct {
	id       int
	lk       *fencelock.Lock
	ctx      context.Context // lk.Context: done when the holder is told
	stop     context.CancelFunc
	cl       *client
	r        resource
	write    bool
	owner    string
	fence    int64
	token    string
	via      string
	start    time.Time     // when the call that took it began
	at       time.Time     // when it was returned to its caller
	sent     time.Time     // when the request that took it was sent (for a job's run)
	ttl      time.Duration // its lease now (Refresh changes it)
	maxTTL   time.Duration // the longest lease it was given
	renew    time.Duration // its renewal interval (0: none)
	fn       *fnRun        // Do and RunJob
	released bool          // its holder released it (Release, Resign, fn returned)
	forcedAt time.Time     // released by token or by force, by forcedBy
	forcedBy *client
	forcer   *call
	// forcedUnseen: released by a call of its own Client that began
	// before the Lock was returned, so told at its next renewal.
	forcedUnseen bool
	toldAt       time.Time // when the model saw it told (Done)
	cause        error
}

func (h *holding) String() string {
	return fmt.Sprintf("%s's %s %s (fence %d, token %s, owner %s)", h.cl.name, h.via, h.r.key, h.fence, h.token, h.owner)
}

func (h *holding) told() bool    { return !h.toldAt.IsZero() }
func (h *holding) forced() bool  { return !h.forcedAt.IsZero() }
func (h *holding) jobRun() bool  { return h.via == "job" }
func (h *holding) isPlain() bool { return h.r.fam == FamLock }

// fnRun is a Do's or RunJob's fn, running until OpFinish or its context ends.
type fnRun struct {
	c        *call
	h        *holding
	tick     string
	start    time.Time
	finish   chan struct{}
	finished time.Time // when OpFinish or the end of its context let it return
}

// leader is a won election.
type leader struct {
	ld       *fencelock.Leadership
	h        *holding
	resigned bool
}

// activeFault is an injected fault, cleared at until.
type activeFault struct {
	f     Fault
	until time.Time
	clear func()
}

// Bounds of the model.
const (
	// exactSlack is what a virtual-time bound allows beyond its exact
	// value: the store rounds a holder's remaining lease up to 1ms.
	exactSlack = 5 * time.Millisecond
	// fallbackPoll is the longest a waiter sleeps between attempts (the
	// default retry strategy's Max).
	fallbackPoll = time.Second
	// substep bounds how long virtual time passes between two checks.
	substep = 250 * time.Millisecond
)

func newMachine(t TB, tg Target) *machine {
	m := &machine{
		t: t, tg: &tg, virtual: tg.Virtual,
		byToken: map[string]*holding{}, jobRuns: map[string][]*fnRun{}, forces: map[resource][]*call{},
		maxFence: map[resource]int64{}, fenceOwner: map[resource]map[int64]string{},
		lastCounter: map[resource]int64{}, lastCallEnd: map[string]time.Time{}, stats: map[string]int{},
		shortened: map[resource]time.Time{},
	}
	m.tg.Job.Name = jobName
	m.opTable = buildOpTable(m.tg)
	m.store = tg.NewStore(t)
	m.faulter, _ = m.store.(Faulter)
	m.start = time.Now()
	m.quietSince = m.start
	for _, k := range forceKeys {
		m.resources = append(m.resources, resource{FamLock, k})
	}
	if tg.Features&Semaphores != 0 {
		m.resources = append(m.resources, resource{FamSem, semName})
	}
	if tg.Features&RWLocks != 0 {
		m.resources = append(m.resources, resource{FamRW, rwName})
	}
	for i := range tg.Clients {
		m.clients = append(m.clients, m.newClient(i, fmt.Sprintf("c%d", i)))
	}
	m.operator = m.newClient(-1, "op")
	return m
}

// newClient makes a Client whose tokens are name-1, name-2, ...
func (m *machine) newClient(slot int, name string) *client {
	var n atomic.Int64
	gen := fencelock.WithTokenGenerator(func() (string, error) {
		return fmt.Sprintf("%s-%d", name, n.Add(1)), nil
	})
	opts := []fencelock.Option{gen}
	if ns := m.store.Namespace(); ns != "" {
		opts = append(opts, fencelock.WithNamespace(ns))
	}
	b := m.store.Backend()
	cl := &client{slot: slot, name: name, c: fencelock.New(b, opts...)}
	cl.cut, _ = b.(Partitioner)
	return cl
}

// clientAt returns the worker in slot i, or the operator for i ==
// Target.Clients.
func (m *machine) clientAt(i int) *client {
	if i >= len(m.clients) {
		return m.operator
	}
	return m.clients[i%len(m.clients)]
}

// note records an event for the failure report.
func (m *machine) note(format string, args ...any) {
	const keep = 400
	e := fmt.Sprintf("%8v ", m.since(time.Now())) + fmt.Sprintf(format, args...)
	if len(m.events) >= keep {
		m.events = slices.Delete(m.events, 0, len(m.events)-keep+1)
	}
	m.events = append(m.events, e)
}

// since is t as time since the check began.
func (m *machine) since(t time.Time) time.Duration { return t.Sub(m.start).Round(time.Microsecond) }

// fail reports a broken invariant, with the steps that led to it.
func (m *machine) fail(format string, args ...any) {
	m.t.Helper()
	m.failed = true
	msg := fmt.Sprintf("%s: at %v after step %d: %s", m.tg.Name, m.since(time.Now()), len(m.steps), fmt.Sprintf(format, args...))
	trace := fmt.Sprintf("recent events:\n%s\n\nsteps (for lockmodel.Replay):\n%s", strings.Join(m.events, "\n"), FormatSteps(m.steps))
	if !m.virtual {
		// Real time does not replay: the trace is this run's.
		m.t.Fatalf("%s\n\n%s", msg, trace)
	}
	// In virtual time the trace is logged, not in the error: rapid shrinks
	// a failure only if a second run fails with the same error.
	m.t.Logf("%s", trace)
	m.t.Fatalf("%s", msg)
}

// exec runs step s, then checks the model.
func (m *machine) exec(s Step) {
	m.t.Helper()
	m.steps = append(m.steps, s)
	if s.Op != OpNop {
		m.note("step %d: %#v", len(m.steps), s)
	}
	m.released = m.released[:0]
	switch s.Op {
	case OpAdvance:
		m.advance(s.Dur)
		return // advance checks as time passes
	case OpAcquire, OpTryAcquire, OpDo:
		m.acquire(s)
	case OpSemaphore:
		m.semaphore(s)
	case OpRWLock:
		m.rwlock(s)
	case OpRunJob:
		m.runJob(s)
	case OpCampaign:
		m.campaign(s)
	case OpResign:
		m.resign(s)
	case OpRelease:
		m.release(s)
	case OpRefresh:
		m.refresh(s)
	case OpTTL:
		m.ttl(s)
	case OpReleaseToken:
		m.releaseToken(s)
	case OpForceRelease:
		m.forceRelease(s)
	case OpFinish:
		m.finish(s)
	case OpCancel:
		m.cancelCall(s)
	case OpClose:
		m.closeClient(s)
	case OpOpen:
		m.open(s)
	case OpFault:
		m.inject(s)
	case OpPartition:
		m.partition(s)
	}
	m.settle()
	m.check()
}

// advance lets d pass, checking the model on the way (in virtual time at
// least every substep, and when a fault ends).
func (m *machine) advance(d time.Duration) {
	end := time.Now().Add(d)
	if !m.virtual {
		time.Sleep(d)
		m.settle()
		m.check()
		return
	}
	for {
		next := end
		if step := time.Now().Add(substep); step.Before(next) {
			next = step
		}
		for _, f := range m.faults {
			if f.until.Before(next) {
				next = f.until
			}
		}
		for _, cl := range m.clients {
			if cl.cutUntil.After(time.Now()) && cl.cutUntil.Before(next) {
				next = cl.cutUntil
			}
		}
		time.Sleep(time.Until(next))
		m.clearFaults(false)
		m.released = m.released[:0]
		m.settle()
		m.check()
		if m.failed || !time.Now().Before(end) {
			return
		}
	}
}

// settle lets the goroutines run, then takes in what the calls returned.
// In virtual time it waits until every goroutine of the bubble is blocked;
// in real time it waits for the calls that return at once.
func (m *machine) settle() {
	if m.virtual {
		synctest.Wait()
	} else {
		// (A call of a Client cut off returns when its requests time
		// out: it is taken in when it has.)
		now := time.Now()
		for _, c := range m.calls {
			if c.quick && m.clientQuiet(c.cl, now) {
				m.await(c, 30*time.Second)
			}
		}
	}
	m.harvest()
}

// await waits up to limit for c to return (real time).
func (m *machine) await(c *call, limit time.Duration) {
	if !c.end.IsZero() {
		return
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case b := <-c.entered:
			m.entered(c, b)
			continue
		case o := <-c.done:
			m.finishCall(c, o)
			return
		case <-timer.C:
			if !m.failed {
				m.fail("%s has not returned within %v", c.what, limit)
			}
			return
		}
	}
}

// harvest takes in the fns that began and the calls that returned.
func (m *machine) harvest() {
	for _, c := range slices.Clone(m.calls) {
		if c.entered != nil {
			select {
			case b := <-c.entered:
				m.entered(c, b)
			default:
			}
		}
		if !c.end.IsZero() {
			continue
		}
		select {
		case o := <-c.done:
			m.finishCall(c, o)
		default:
		}
	}
	m.calls = slices.DeleteFunc(m.calls, func(c *call) bool { return !c.end.IsZero() })
}

// finishCall takes in c's outcome.
func (m *machine) finishCall(c *call, o outcome) {
	if c.entered != nil {
		select {
		case b := <-c.entered: // fn began before the call returned
			m.entered(c, b)
		default:
		}
	}
	c.end = o.at
	if c.cl != nil && c.r.key != "" {
		m.lastCallEnd[c.cl.name+"|"+c.r.String()] = c.end
	}
	m.note("%s returned: %s", c.what, describe(o))
	if c.onDone != nil {
		c.onDone(c, o)
	}
}

func describe(o outcome) string {
	var parts []string
	if o.lk != nil {
		parts = append(parts, fmt.Sprintf("lock fence %d token %s holds %d", o.lk.Fence(), o.lk.Token(), o.lk.Holds()))
	}
	if o.ld != nil {
		parts = append(parts, fmt.Sprintf("leader term %d", o.ld.Term()))
	}
	if o.ran {
		parts = append(parts, "ran")
	}
	if o.err != nil {
		parts = append(parts, "error: "+o.err.Error())
	}
	if len(parts) == 0 {
		return "ok"
	}
	return strings.Join(parts, "; ")
}

// newCall makes a call of cl about r, started by go.
func (m *machine) newCall(cl *client, what string, r resource, parent context.Context) *call {
	m.nextID++
	c := &call{id: m.nextID, what: fmt.Sprintf("#%d %s %s", m.nextID, cl.name, what), cl: cl, r: r,
		start: time.Now(), done: make(chan outcome, 1), floor: m.maxFence[r], faulty: !m.clientQuiet(cl, time.Now())}
	c.ctx, c.cancel = context.WithCancel(parent)
	return c
}

// run starts c on a goroutine of its own.
func (m *machine) run(c *call, f func(ctx context.Context) outcome) {
	m.calls = append(m.calls, c)
	m.note("%s started", c.what)
	go func() {
		o := f(c.ctx)
		o.at = time.Now()
		c.done <- o
	}()
}

// ownerCtx returns ctx with the owner of s (WithOwner), if any.
func ownerCtx(ctx context.Context, s Step) (context.Context, string) {
	if s.Owner == 0 {
		return ctx, ""
	}
	owner := fmt.Sprintf("owner-%d", s.Owner)
	return fencelock.WithOwner(ctx, owner), owner
}

// steadyBackoff is the default retry strategy's schedule (10ms doubling to
// 1s) without its jitter: in virtual time the jitter, drawn from the
// global random source, would make a check differ from one run to the
// next, and a shrunk counterexample fail to replay.
type steadyBackoff struct{}

func (steadyBackoff) Backoff(failures int) time.Duration {
	d := 10 * time.Millisecond
	for i := 1; i < failures && d < fallbackPoll; i++ {
		d *= 2
	}
	return min(d, fallbackPoll)
}

// options returns the acquire options of s for a lease of ttl, and the
// renewal interval they give (Do and Campaign renew every ttl/3 unless
// told otherwise).
func (m *machine) options(s Step, ttl time.Duration, defaultRenew time.Duration) ([]fencelock.AcquireOption, time.Duration) {
	var opts []fencelock.AcquireOption
	if m.virtual {
		opts = append(opts, fencelock.WithRetry(steadyBackoff{}))
	}
	renew := defaultRenew
	switch s.Renew {
	case 1:
		renew = ttl / 3
	case 2:
		renew = ttl / 2
	}
	if s.Renew != 0 {
		opts = append(opts, fencelock.WithAutoRenew(renew))
	}
	switch s.MaxHold {
	case 1:
		opts = append(opts, fencelock.WithMaxHold(max(ttl/2, fencelock.MinTTL)))
	case 2:
		opts = append(opts, fencelock.WithMaxHold(2*ttl))
	}
	if s.HasWait {
		opts = append(opts, fencelock.WithWait(s.Wait))
	}
	if s.Fair {
		opts = append(opts, fencelock.WithFairness())
	}
	return opts, renew
}

func (s Step) describeOptions() string {
	var parts []string
	if s.Owner != 0 {
		parts = append(parts, fmt.Sprintf("owner-%d", s.Owner))
	}
	if s.Fair {
		parts = append(parts, "fair")
	}
	if s.HasWait {
		parts = append(parts, "wait "+s.Wait.String())
	}
	if s.Renew != 0 {
		parts = append(parts, fmt.Sprintf("renew %d", s.Renew))
	}
	if s.MaxHold != 0 {
		parts = append(parts, fmt.Sprintf("maxhold %d", s.MaxHold))
	}
	return strings.Join(parts, " ")
}

// acquire starts an Acquire, TryAcquire or Do of a plain key.
func (m *machine) acquire(s Step) {
	cl := m.clientAt(s.Client)
	key := plainKeys[s.Key%len(plainKeys)]
	r := resource{FamLock, key}
	ctx, owner := ownerCtx(context.Background(), s)
	defaultRenew := time.Duration(0)
	if s.Op == OpDo {
		defaultRenew = s.TTL / 3
	}
	opts, renew := m.options(s, s.TTL, defaultRenew)
	c := m.newCall(cl, fmt.Sprintf("%v %s ttl %v %s", s.Op, key, s.TTL, s.describeOptions()), r, ctx)
	c.owner, c.fair = owner, s.Fair
	c.waiting = s.Op != OpTryAcquire && !(s.HasWait && s.Wait == 0)
	if s.HasWait {
		c.until = c.start.Add(s.Wait)
	}
	ttl := s.TTL
	switch s.Op {
	case OpAcquire, OpTryAcquire:
		via := "acquire"
		if s.Op == OpTryAcquire {
			via = "try"
			c.quick = true
			c.predictFree = !s.Fair && m.knownFree(cl, r)
		}
		c.onDone = func(c *call, o outcome) {
			m.expectErr(c, o.err, fencelock.ErrNotAcquired, fencelock.ErrUnavailable, fencelock.ErrClosed)
			if o.lk != nil {
				m.register(c, o.lk, via, ttl, renew, o.at)
			} else if c.predictFree && o.err != nil {
				m.fail("%s found the lock free (no hold on the store, no fault), but failed: %v", c.what, o.err)
			}
		}
		acquire := cl.c.Acquire
		if s.Op == OpTryAcquire {
			acquire = cl.c.TryAcquire
		}
		m.run(c, func(ctx context.Context) outcome {
			lk, err := acquire(ctx, key, ttl, opts...)
			return outcome{lk: lk, err: err}
		})
	case OpDo:
		fn := &fnRun{c: c, finish: make(chan struct{})}
		c.fn, c.via, c.ttl, c.renew = fn, "do", ttl, renew
		c.entered = make(chan began, 1)
		c.onDone = func(c *call, o outcome) {
			m.expectErr(c, o.err, fencelock.ErrNotAcquired, fencelock.ErrUnavailable, fencelock.ErrClosed, fencelock.ErrLost)
			if h := fn.h; h != nil && o.err == nil && errors.Is(h.lk.Err(), fencelock.ErrLost) {
				m.fail("%s returned nil, but its lock was lost: %v", c.what, h.lk.Err())
			}
			if fn.h != nil && !fn.finished.IsZero() && o.err == nil {
				c.ok = true
				m.released = append(m.released, c) // Do released it
			}
		}
		c.fn.start = time.Now()
		m.run(c, func(ctx context.Context) outcome {
			err := cl.c.Do(ctx, key, ttl, func(fctx context.Context, lk *fencelock.Lock) error {
				c.entered <- began{lk, time.Now()}
				select {
				case <-fn.finish:
				case <-fctx.Done():
				}
				return nil
			}, opts...)
			return outcome{err: err}
		})
	}
}
