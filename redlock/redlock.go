// Package redlock is a driver.Store over several independent Redis
// masters (the Redlock algorithm): a lock is held when a majority of them
// hold it, so it survives the loss of a minority of masters, with fencing
// tokens that never go back.
//
//	clients := []redis.UniversalClient{rdb1, rdb2, rdb3, rdb4, rdb5}
//	b, err := redlock.New(clients)
//	if err != nil { ... }
//	locks := fencelock.New(b)
//
// Each master runs the same scripts as the redisbackend package (one
// redisbackend.Backend per master). An attempt goes to every master at once
// and counts only when a majority granted it; otherwise the attempt is
// undone everywhere. Renewals and releases also go to every master; a lock
// whose renewal a majority no longer confirms is lost, and its holder told.
//
// # Fences across the quorum
//
// Each master mints max(its counter + 1, its clock in µs, the client's floor
// + 1). The lock's fence is the largest minted by the majority that granted
// it, and before the acquisition is reported, it is written back to that
// majority (counter = max(counter, fence)). Any later acquisition needs a
// majority too, which shares at least one master with the one written to:
// that master mints a larger value, so the later fence is larger. This
// holds as long as a master does not forget its counter: a master restarted
// without persistence (no AOF with fsync) must stay down for longer than the
// longest ttl, and its clock must not step back (its TIME in µs then floors
// the counter it forgot); the Client's own floor covers the fences it has
// seen. See docs/backends.md ("Redlock" and "Choosing one") for what Redlock
// does and does not guarantee.
//
// # Undone attempts, and grants that do not count
//
// An attempt that does not reach a majority is undone: its holds are
// released on the masters that granted it. The Client then tries again with
// the same token, so that a grant whose reply was lost is completed by the
// next attempt. An undo release that a master confirmed was applied before
// the next attempt was sent, and cannot touch it. One that was sent but not
// confirmed (it timed out, or its connection failed after writing it) can
// still be applied by that master later, after the next attempt was granted
// there, and then it deletes that grant: counted toward the majority, it
// would leave the Client believing it holds a majority that another client
// can take. So the Backend remembers, per token, the masters whose undo
// release was not confirmed, and for that token a grant, a renewal or a
// remaining lease (TTL) from such a master never counts toward the majority:
// its hold may vanish at any moment. The lock then needs a majority of the
// other masters. The marks are forgotten when the token is released
// (Release returns, whatever the outcome); holds never released (an
// acquire that gave up without a release, a crashed Client) keep theirs
// until 10,000 newer ones push them out, oldest first.
//
// # Job ticks
//
// RunJob needs a record of each job's last claimed tick
// (driver.Ticker). Each master keeps one as the Redis backend
// does, and decides an attempt as that backend's script does: a record
// naming the tick or a later one (other than this attempt's own claim, a
// retry) refuses it as claimed; otherwise the master grants or refuses
// the lock, and writes the record when it grants. The tick's run begins only when a
// majority granted, as for any acquisition.
//
// Why a tick runs at most once: a run began because a majority M granted
// its claim, so every master of M wrote its record. A later attempt for
// that tick or an earlier one needs grants from a majority too, which
// shares a master with M (two majorities of an odd number of masters
// intersect); that master's record names the tick or a later one (a
// master's record only moves to later ticks, except by the undo below,
// which never touches a claim that counted), so it refuses as claimed, and
// the later attempt cannot reach a majority. As for fences, this holds as
// long as a master does not forget: a master restarted without persistence
// must stay down for longer than the record's life.
//
// An attempt short of a majority is undone on the masters that granted it:
// its holds released, and its claims taken back (redisbackend's
// UndoTickClaim puts back the claim each replaced). Without that, two
// instances that each won some masters for the same tick, neither a
// majority (or one master down and a split of the others), would leave
// records on every master, and every attempt after would be refused as
// claimed: the tick would never run. A master whose undo was not
// confirmed is marked for the token as for Acquire (its late undo could
// take back a later grant's claim there), and does not count for it.
//
// When is the tick claimed, then? A refusal as claimed from a single
// master proves nothing: it may be the claim of an attempt that is about
// to be undone (in the race above, each instance sees the others' claims).
// Taking a single master's claim as final loses ticks: 4 instances racing
// for 15 ticks over 3 masters left up to half of them unrun
// (TestTickRaceRunsEveryTickOnce). So the Backend reports Claimed only
// when a majority of masters name the same claim (tick and token): that
// claim reached a majority, so its run began (or the attempt is being
// undone after a failed fence write-back, a fault). A majority of grants
// wins, whatever a minority says: by the argument above, a minority's
// claim did not count. Anything between (the claims of attempts in
// flight, a master whose undo was lost) is a refusal without a claim,
// with the shortest lease of a holder if masters reported one: the waiter
// tries again, until the tick's period is over.
package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// ErrNoQuorum is matched by every *QuorumError: too few masters answered
// for the call to decide.
var ErrNoQuorum = errors.New("redlock: no quorum of masters answered")

// QuorumError reports a call that too few masters answered: the errors of
// those that failed, each naming its master.
type QuorumError struct {
	Op      string  // "acquire", "release", "renew", "ttl", "watch"
	Need    int     // masters that must answer (the majority)
	Answers int     // masters that answered
	Errs    []error // one per master that failed, naming it
}

func (e *QuorumError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("redlock: %s: %d of %d masters needed answered: %s", e.Op, e.Answers, e.Need, strings.Join(msgs, "; "))
}

// Unwrap returns the masters' errors.
func (e *QuorumError) Unwrap() []error { return e.Errs }

// Is reports whether target is ErrNoQuorum.
func (e *QuorumError) Is(target error) bool { return target == ErrNoQuorum }

// Backend is a driver.Store over N independent Redis masters.
type Backend struct {
	nodes       []node
	quorum      int
	drift       float64
	nodeTimeout time.Duration
	// poisoned marks, per hold, the masters whose undo release was not
	// confirmed: their holds of that token do not count (see undo).
	poisoned *poisonSet
}

// node is one master.
type node struct {
	name string
	b    *redisbackend.Backend
}

// Option configures a Backend.
type Option func(*Backend)

// WithDriftFactor sets the fraction of each lease that is not counted on,
// for the masters' clocks running at different rates (Redlock's clock
// drift; default 0.01, plus 2 ms). Must be in [0, 0.5).
func WithDriftFactor(f float64) Option { return func(b *Backend) { b.drift = f } }

// DefaultDriftFactor is the default WithDriftFactor.
const DefaultDriftFactor = 0.01

// WithNodeTimeout bounds each request to one master (default
// DefaultNodeTimeout), so that a master that is down or paused delays a
// call by that much at most: the others decide. Keep it small against the
// ttl, as Redlock asks, but above a round trip on a busy network.
func WithNodeTimeout(d time.Duration) Option { return func(b *Backend) { b.nodeTimeout = d } }

// DefaultNodeTimeout is the default WithNodeTimeout.
const DefaultNodeTimeout = 250 * time.Millisecond

// New returns a Backend over the masters clients (an odd number of
// independent masters, not replicas of one another; each may be a
// *redis.Client, or a failover client). Give their go-redis options
// ContextTimeoutEnabled (as for redisbackend), and a short dial: a master
// that is down should cost a refused dial, not go-redis's default of 5
// dial retries 100 ms apart (DialerRetries 1, DialerRetryTimeout 1 ms,
// DialTimeout a few hundred ms).
func New(clients []redis.UniversalClient, opts ...Option) (*Backend, error) {
	return NewWithBackendOptions(clients, nil, opts...)
}

// NewWithBackendOptions is New with options for the redisbackend.Backend of
// every master (for instance WithFenceCounterExpiry).
func NewWithBackendOptions(clients []redis.UniversalClient, redisOpts []redisbackend.Option, opts ...Option) (*Backend, error) {
	n := len(clients)
	if n == 0 || n%2 == 0 {
		return nil, &driver.InvalidArgumentError{Name: "masters", Value: n, Reason: "must be an odd number (1, 3, 5, ...), so that two majorities always share a master"}
	}
	b := &Backend{quorum: n/2 + 1, drift: DefaultDriftFactor, nodeTimeout: DefaultNodeTimeout, poisoned: newPoisonSet(maxPoisoned)}
	for _, opt := range opts {
		if opt != nil {
			opt(b)
		}
	}
	if b.drift < 0 || b.drift >= 0.5 {
		return nil, &driver.InvalidArgumentError{Name: "WithDriftFactor", Value: b.drift, Reason: "must be in [0, 0.5)"}
	}
	if b.nodeTimeout < time.Millisecond {
		return nil, &driver.InvalidArgumentError{Name: "WithNodeTimeout", Value: b.nodeTimeout, Reason: "must be at least 1ms"}
	}
	for i, c := range clients {
		if c == nil {
			return nil, &driver.InvalidArgumentError{Name: "masters", Value: i, Reason: "client is nil"}
		}
		b.nodes = append(b.nodes, node{name: nodeName(i, c), b: redisbackend.New(c, redisOpts...)})
	}
	return b, nil
}

// nodeName names master i for errors: its address when known.
func nodeName(i int, c redis.UniversalClient) string {
	if rc, ok := c.(*redis.Client); ok {
		return fmt.Sprintf("master %d (%s)", i, rc.Options().Addr)
	}
	return fmt.Sprintf("master %d", i)
}

// Quorum returns the number of masters that make a majority.
func (b *Backend) Quorum() int { return b.quorum }

// Validity returns the part of a lease of ttl that the Backend counts on,
// from before its request was sent: ttl less the masters' clock drift
// (ttl × the drift factor, plus 2 ms). Acquire and Renew report it
// (AcquireResult.Validity, RenewResult.Validity), and the Client's local
// deadline ends its safety margin before it.
func (b *Backend) Validity(ttl time.Duration) time.Duration {
	return ttl - time.Duration(float64(ttl)*b.drift) - 2*time.Millisecond
}

// answer is one master's reply to a call.
type answer[T any] struct {
	val T
	err error
}

// each calls f on every master at once and returns their answers, in the
// masters' order. Every call is bounded by ctx and by the node timeout;
// each returns once every call has.
func each[T any](b *Backend, ctx context.Context, f func(ctx context.Context, i int, n node) (T, error)) []answer[T] {
	out := make([]answer[T], len(b.nodes))
	var wg sync.WaitGroup
	for i, n := range b.nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, b.nodeTimeout)
			defer cancel()
			v, err := f(ctx, i, n)
			if err != nil {
				err = fmt.Errorf("%s: %w", n.name, err)
			}
			out[i] = answer[T]{v, err}
		})
	}
	wg.Wait()
	return out
}

// failures returns the errors among answers, and the first that is an
// invalid argument (which no master will ever accept).
func failures[T any](answers []answer[T]) (errs []error, invalid error) {
	for _, a := range answers {
		if a.err != nil {
			errs = append(errs, a.err)
			if invalid == nil && errors.Is(a.err, driver.ErrInvalidArgument) {
				invalid = a.err
			}
		}
	}
	return errs, invalid
}

// undoTimeout bounds the release of an acquisition that failed to reach a
// majority, made on a context of its own (the caller's may be done).
const undoTimeout = time.Second

// Acquire implements driver.Store: the lock is acquired when a
// majority of masters grant it. Its fence is the largest they minted,
// written back to the majority before Acquire returns. Otherwise the grants
// are undone on every master, and the result is not acquired (a majority
// refused), or the error is a *QuorumError (too few answered). A master
// where an earlier attempt's undo release of this token was not confirmed
// does not count, whatever it answers: its grant may be deleted at any
// moment by that release.
func (b *Backend) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := plainOnly(req.Kind); err != nil {
		return driver.Result{}, err
	}
	answers := each(b, ctx, func(ctx context.Context, _ int, n node) (driver.Result, error) {
		return n.b.Acquire(ctx, req)
	})
	errs, invalid := failures(answers)
	if invalid != nil {
		return driver.Result{}, invalid
	}
	poisoned := b.poisoned.get(req.Ref)
	var granted []int
	var fence int64
	holds := 0
	unknown := 0 // masters that failed and whose grant would count
	holderTTL := time.Duration(0)
	for i, a := range answers {
		switch {
		case poisoned.has(i):
			// Neither a grant nor a refusal: undo still releases its
			// grant, so that the hold does not linger there.
		case a.err != nil:
			unknown++
		case a.val.Acquired:
			granted = append(granted, i)
			fence = max(fence, a.val.Fence)
			holds = max(holds, a.val.Holds)
		case a.val.HolderTTL > 0 && (holderTTL == 0 || a.val.HolderTTL < holderTTL):
			holderTTL = a.val.HolderTTL
		}
	}
	if len(granted) >= b.quorum {
		if err := b.raise(ctx, req, granted, fence); err != nil {
			b.undo(req, answers)
			return driver.Result{}, err
		}
		return driver.Result{Acquired: true, Fence: fence, Holds: holds, Validity: b.Validity(req.TTL)}, nil
	}
	b.undo(req, answers)
	if len(granted)+unknown >= b.quorum {
		// The masters that failed could have granted it: not a refusal
		// by a majority, and too few answers to decide.
		return driver.Result{}, &QuorumError{Op: "acquire", Need: b.quorum, Answers: len(b.nodes) - len(errs), Errs: errs}
	}
	return driver.Result{HolderTTL: holderTTL}, nil
}

// raise writes fence back to the granting masters; a majority must confirm.
func (b *Backend) raise(ctx context.Context, req driver.Request, granted []int, fence int64) error {
	answers := each(b, ctx, func(ctx context.Context, i int, n node) (bool, error) {
		if !slices.Contains(granted, i) {
			return false, nil
		}
		return n.b.RaiseFence(ctx, req.Namespace, req.Key, req.Token, fence)
	})
	confirmed := 0
	var errs []error
	for _, a := range answers {
		switch {
		case a.err != nil:
			errs = append(errs, a.err)
		case a.val:
			confirmed++
		}
	}
	if confirmed < b.quorum {
		return &QuorumError{Op: "acquire (fence write-back)", Need: b.quorum, Answers: confirmed, Errs: errs}
	}
	return nil
}

// undo releases an acquisition that did not reach a majority, on the
// masters that granted it. Not on those that did not answer: a release sent
// there could arrive late, after the Client's next attempt (same token) was
// granted, and take that grant away; a late grant there is instead counted
// by the next attempt, removed by the Client's final release (with a
// tombstone, when it gives up), or ends with its lease. No tombstone either:
// the Client tries again with the same token, which a tombstone would
// refuse.
//
// An undo release that a master confirmed was applied before undo returns,
// so before the next attempt is sent. One that failed after it may have
// been written (any error but driver.ErrNotSent: it timed out, or its
// connection broke) leaves the window above open on that master for good:
// nothing bounds how late it can be applied. Such masters are marked for
// the token (b.poisoned), and no longer count for it in Acquire, Renew or
// TTL; Release forgets the marks.
func (b *Backend) undo(req driver.Request, answers []answer[driver.Result]) {
	ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	defer cancel()
	released := each(b, ctx, func(ctx context.Context, i int, n node) (driver.ReleaseResult, error) {
		if a := answers[i]; a.err != nil || !a.val.Acquired {
			return driver.ReleaseResult{}, nil
		}
		return n.b.Release(ctx, driver.ReleaseRequest{Ref: req.Ref})
	})
	var late []int
	for i, r := range released {
		if r.err != nil && !errors.Is(r.err, driver.ErrNotSent) {
			late = append(late, i)
		}
	}
	b.poisoned.add(req.Ref, len(b.nodes), late)
}

// Release implements driver.Store: it releases the hold on every
// master. Held is true when a majority held it; the error is a *QuorumError
// when too few masters answered to tell. Either way, the Backend forgets
// the masters whose undo release of the token was not confirmed (undo): the
// Client makes no further acquire or renewal with a token it released.
func (b *Backend) Release(ctx context.Context, req driver.ReleaseRequest) (driver.ReleaseResult, error) {
	if err := plainOnly(req.Kind); err != nil {
		return driver.ReleaseResult{}, err
	}
	defer b.poisoned.forget(req.Ref)
	answers := each(b, ctx, func(ctx context.Context, _ int, n node) (driver.ReleaseResult, error) {
		return n.b.Release(ctx, req)
	})
	errs, invalid := failures(answers)
	if invalid != nil {
		return driver.ReleaseResult{}, invalid
	}
	var left []int // holds left, on each master that held this one
	for _, a := range answers {
		if a.err == nil && a.val.Held {
			left = append(left, a.val.Remaining)
		}
	}
	held := len(left)
	switch {
	case held >= b.quorum:
		// The holds a majority still has: a master where a late acquire
		// of another hold landed may have more, which no majority shares.
		slices.Sort(left)
		slices.Reverse(left)
		return driver.ReleaseResult{Held: true, Remaining: left[b.quorum-1]}, nil
	case held+len(errs) >= b.quorum:
		return driver.ReleaseResult{}, &QuorumError{Op: "release", Need: b.quorum, Answers: len(b.nodes) - len(errs), Errs: errs}
	}
	return driver.ReleaseResult{}, nil
}

// Renew implements driver.Store: one batch per master, all at once. A
// hold is renewed when a majority renewed it; it is reported gone when
// enough masters said so that no majority can hold it; otherwise its
// RenewResult.Err is a *QuorumError (the Client retries until its deadline).
// A master where an undo release of the hold's token was not confirmed
// counts as not holding it, whatever it answers (see undo).
func (b *Backend) Renew(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	for _, r := range reqs {
		if err := plainOnly(r.Kind); err != nil {
			return nil, err
		}
	}
	answers := each(b, ctx, func(ctx context.Context, _ int, n node) ([]driver.RenewResult, error) {
		res, err := n.b.Renew(ctx, reqs)
		if err == nil && len(res) != len(reqs) {
			err = fmt.Errorf("%d results for %d renewals", len(res), len(reqs))
		}
		return res, err
	})
	errs, invalid := failures(answers)
	if invalid != nil {
		return nil, invalid
	}
	if len(errs) == len(b.nodes) {
		return nil, &QuorumError{Op: "renew", Need: b.quorum, Errs: errs}
	}
	results := make([]driver.RenewResult, len(reqs))
	for i := range reqs {
		poisoned := b.poisoned.get(reqs[i].Ref)
		held, unknown := 0, 0
		var lockErrs []error
		for j, a := range answers {
			switch {
			case poisoned.has(j):
				// Its hold may vanish at any moment: neither held nor
				// unknown, since no retry can make it count.
			case a.err != nil:
				unknown++
			case a.val[i].Err != nil:
				unknown++
				lockErrs = append(lockErrs, a.val[i].Err)
			case a.val[i].Held:
				held++
			}
		}
		switch {
		case held >= b.quorum:
			results[i].Held = true
			results[i].Validity = b.Validity(reqs[i].TTL)
		case held+unknown >= b.quorum:
			results[i].Err = &QuorumError{Op: "renew", Need: b.quorum, Answers: len(b.nodes) - unknown, Errs: slices.Concat(errs, lockErrs)}
		}
	}
	return results, nil
}

// TTL implements driver.Store: the time for which a majority of
// masters still hold the hold (the majority-th longest of their leases).
// A master where an undo release of the token was not confirmed counts as
// not holding it (see undo).
func (b *Backend) TTL(ctx context.Context, ref driver.Ref) (time.Duration, error) {
	if err := plainOnly(ref.Kind); err != nil {
		return 0, err
	}
	answers := each(b, ctx, func(ctx context.Context, _ int, n node) (time.Duration, error) {
		return n.b.TTL(ctx, ref)
	})
	poisoned := b.poisoned.get(ref)
	var ttls []time.Duration
	var errs []error
	for i, a := range answers {
		switch {
		case poisoned.has(i):
			// Counts as not holding it.
		case a.err == nil:
			ttls = append(ttls, a.val)
		case errors.Is(a.err, driver.ErrInvalidArgument):
			return 0, a.err
		case !errors.Is(a.err, driver.ErrNotHeld):
			errs = append(errs, a.err)
		}
	}
	if len(ttls) >= b.quorum {
		slices.Sort(ttls)
		slices.Reverse(ttls)
		return ttls[b.quorum-1], nil
	}
	if len(ttls)+len(errs) >= b.quorum {
		return 0, &QuorumError{Op: "ttl", Need: b.quorum, Answers: len(b.nodes) - len(errs), Errs: errs}
	}
	return 0, fmt.Errorf("redlock: %w on a majority of masters", driver.ErrNotHeld)
}

// Watch implements driver.Notifier for the plain lock: a release message
// (or, with Changes, an "acquired" message of an acquisition with
// Request.Notify, published by each master that grants it) from any master
// wakes the watcher. Masters whose notifications cannot be had are left out
// (the waiter's fallback timer covers them); it fails only when none can.
// There is no line of waiters to watch a turn in (Token).
func (b *Backend) Watch(ctx context.Context, req driver.WatchRequest) (*driver.Watch, error) {
	if err := plainOnly(req.Kind); err != nil {
		return nil, err
	}
	if req.Token != "" {
		return nil, fmt.Errorf("%w: redlock keeps no line of waiters", driver.ErrUnsupported)
	}
	return b.watchEach(ctx, func(ctx context.Context, n node) (*driver.Watch, error) {
		return n.b.Watch(ctx, req)
	})
}

// watchEach makes a watch on every master and merges them: see Watch.
func (b *Backend) watchEach(ctx context.Context, watch func(context.Context, node) (*driver.Watch, error)) (*driver.Watch, error) {
	answers := each(b, ctx, func(ctx context.Context, _ int, n node) (*driver.Watch, error) {
		return watch(ctx, n)
	})
	var watches []*driver.Watch
	var errs []error
	for _, a := range answers {
		if a.err != nil {
			errs = append(errs, a.err)
		} else {
			watches = append(watches, a.val)
		}
	}
	if len(watches) == 0 {
		return nil, &QuorumError{Op: "watch", Need: 1, Errs: errs}
	}
	// One goroutine per master's watch forwards its wake-ups until the
	// watch is stopped; Stop waits for them.
	wake := make(chan struct{}, 1)
	quit := make(chan struct{})
	var forwarders sync.WaitGroup
	for _, w := range watches {
		forwarders.Go(func() {
			for {
				select {
				case <-quit:
					return
				case <-w.C:
					select {
					case wake <- struct{}{}:
					default:
					}
				}
			}
		})
	}
	var once sync.Once
	return driver.NewWatch(wake, func() {
		once.Do(func() {
			close(quit)
			forwarders.Wait()
			for _, w := range watches {
				w.Stop()
			}
		})
	}), nil
}

// Close closes every master's redisbackend.Backend (not the Redis clients).
func (b *Backend) Close() error {
	var errs []error
	for _, n := range b.nodes {
		if err := n.b.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.name, err))
		}
	}
	return errors.Join(errs...)
}
