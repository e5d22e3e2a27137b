// Package redisbackend keeps fencelock locks in Redis, through a go-redis v9
// UniversalClient (New): a single node (redis.NewClient), Sentinel
// (redis.NewFailoverClient) or Cluster (redis.NewClusterClient); or through
// another client library's Transport (NewTransport), such as rueidis's in
// the module github.com/fencelock/fencelock/redisbackend/rueidistransport.
// Backends on different clients share locks.
//
// Each operation is one Lua script in one round trip; renewals of many locks
// go in one pipelined round trip; waiters are woken by pub/sub. The key
// layout is described in keys.go and in docs/how-it-works.md. Redis 6 or later.
//
// Set ContextTimeoutEnabled in the go-redis options. fencelock gives every
// request a deadline (a wait bound, a lease, a renewal interval) and must
// not wait past it; go-redis enforces a context's deadline only with that
// option. With it, requests run on the caller's goroutine; without it, the
// Backend runs each request on a goroutine of its own and stops waiting at
// the deadline, which costs about as much client CPU as the request itself
// (WithLogger: New warns of it).
// A cancellation before the deadline is then noticed before the request is
// sent and when the reply is in (a round trip), or, if the server does not
// answer, at the deadline or go-redis's read timeout, whichever comes first.
package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/redis/go-redis/v9"
)

// Backend is a driver.Store on Redis. Make one per fencelock.Client:
// the Client closes it.
type Backend struct {
	tr       Transport
	gr       *goRedis  // tr, when it is go-redis's (New); nil otherwise
	notifier *notifier // nil when release notifications are off
	scripts  scriptCache
	pipe     coalescer // acquire, release and TTL calls, pipelined under load

	counterExpiry time.Duration // 0: fence counters never expire
	turnGrace     time.Duration // how long a process woken for its turn has the free lock to itself (otherTurnGrace)
	ack           *replicaAck   // nil: no replica acknowledgement
	optErr        error         // an invalid option, returned by every call

	// contextDeadlines: go-redis ends each request at its context's
	// deadline (ContextTimeoutEnabled), so guard need not watch the
	// context. A Transport of NewTransport honours its context itself.
	contextDeadlines bool

	calls sync.WaitGroup // requests still running after their caller gave up
}

// Option configures a Backend.
type Option func(*options)

type options struct {
	notifications bool
	readyTimeout  time.Duration
	maxInflight   int
	counterExpiry time.Duration
	ack           *replicaAck
	logger        *slog.Logger
}

// WithoutReleaseNotifications makes waiters poll (with jittered backoff,
// bounded by the holder's remaining lease) instead of subscribing to release
// messages: for proxies and managed services that do not offer pub/sub.
func WithoutReleaseNotifications() Option {
	return func(o *options) { o.notifications = false }
}

// WithFenceCounterExpiry lets a lock's fence counter key expire after d
// without an acquisition (by default it never expires). Use it when locks
// are made per request or per user, so that their counters do not pile up.
//
// Fences stay strictly increasing: a new counter starts at the server's
// clock in microseconds, and every earlier fence was at most the clock of
// its own acquisition (a script takes longer than a microsecond). The one
// condition is that the server's clock never steps back by more than d; a
// day (24h) leaves a wide margin. A d of zero or less keeps counters forever.
func WithFenceCounterExpiry(d time.Duration) Option {
	return func(o *options) { o.counterExpiry = max(d, 0) }
}

// WithLogger gives the Backend a logger for what it has to say at New:
// a warning when rdb lacks ContextTimeoutEnabled, so that each request
// pays for a goroutine of its own (see the package documentation). By
// default the Backend logs nothing.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// New returns a Backend that uses rdb. The caller keeps ownership of rdb:
// closing the Backend (through fencelock.Client.Close) does not close it.
func New(rdb redis.UniversalClient, opts ...Option) *Backend {
	g := &goRedis{rdb: rdb}
	return newBackend(g, g, opts)
}

// newBackend returns a Backend on tr, which is g when it is go-redis's.
func newBackend(tr Transport, g *goRedis, opts []Option) *Backend {
	o := options{notifications: true, readyTimeout: time.Second, maxInflight: 4}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	b := &Backend{tr: tr, gr: g, counterExpiry: o.counterExpiry, ack: o.ack, contextDeadlines: g == nil || enforcesContextDeadlines(g.rdb)}
	if o.ack != nil {
		b.optErr = o.ack.check()
	}
	if o.logger != nil && !b.contextDeadlines {
		o.logger.Warn("redisbackend: the go-redis client has ContextTimeoutEnabled off: each request runs on a goroutine of its own so that its caller returns at its deadline, at about twice the client CPU; set ContextTimeoutEnabled in the go-redis options")
	}
	b.pipe = coalescer{tr: tr, scripts: &b.scripts, maxFlushers: o.maxInflight}
	b.turnGrace = otherTurnGrace
	if o.notifications {
		b.notifier = newNotifier(tr, o.readyTimeout)
		b.notifier.leaveLine = b.leaveLine
	}
	return b
}

// leaveLine runs leaveLineScript for the lock whose release channel is
// channel, in the background as publishHint does: none of this process's
// waiters waits for the lock any more.
func (b *Backend) leaveLine(channel string) {
	lock, ok := lockKeyOfChannel(channel)
	if !ok {
		return
	}
	b.calls.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hintTimeout)
		defer cancel()
		_ = b.scripts.run(ctx, b.tr, leaveLineScript, []string{lock}, channel, b.notifier.id)
	})
}

// acquireLock is Acquire of a KindLock: acquireScript.
func (b *Backend) acquireLock(ctx context.Context, req driver.Request) (driver.Result, error) {
	if b.optErr != nil {
		return driver.Result{}, b.optErr
	}
	if err := checkNames(req.Namespace, req.Key); err != nil {
		return driver.Result{}, err
	}
	if err := checkLease("ttl", req.TTL); err != nil {
		return driver.Result{}, err
	}
	k := keysFor(req.Namespace, req.Key)
	res, err := guard(b, ctx, func(ctx context.Context) (driver.Result, error) {
		keys := []string{k.lock, k.fence, k.tombstone(req.Token)}
		args := b.acquireArgs(k, req)
		if b.ack != nil {
			return b.acquireAcked(ctx, acquireScript, keys, k, req, args)
		}
		res, err := acquireReply(b.pipe.run(ctx, acquireScript, keys, args...))
		if err != nil {
			return driver.Result{}, classify(err)
		}
		return res, nil
	})
	if err == nil {
		b.notifyAcquired(ctx, req, res, k)
	}
	return res, err
}

// acquireArgs are the ARGV of the acquire script for req on the lock k.
func (b *Backend) acquireArgs(k lockKeys, req driver.Request) []any {
	// The owner is the token unless WithOwner says otherwise: one boxing
	// (an allocation) serves both.
	token := any(req.Token)
	owner := token
	if req.Owner != req.Token {
		owner = req.Owner
	}
	args := []any{owner, token, ms(req.TTL), ms(b.counterExpiry), max(req.FenceFloor, 0)}
	// A process with a waiter for the key gets in line for its turn if
	// refused (lua/turns.lua).
	process := b.notifier.waitingProcess(k.channel)
	if process != "" || req.Identity != "" {
		args = append(args, process)
	}
	if req.Identity != "" {
		args = append(args, req.Identity)
	}
	return args
}

// releaseLock is Release of a KindLock: releaseScript.
func (b *Backend) releaseLock(ctx context.Context, req driver.ReleaseRequest) (driver.ReleaseResult, error) {
	if err := b.checkRelease(req); err != nil {
		return driver.ReleaseResult{}, err
	}
	k := keysFor(req.Namespace, req.Key)
	return guard(b, ctx, func(ctx context.Context) (driver.ReleaseResult, error) {
		process, waits := b.releasingProcess(k)
		reply, err := b.pipe.run(ctx, releaseScript, k.releaseKeys(req.Token),
			req.Token, k.channel, ms(max(req.Tombstone, 0)), ms(b.counterExpiry), process, waits, ms(b.turnGrace)).result()
		if err != nil {
			return driver.ReleaseResult{}, classify(err)
		}
		res, _, err := releaseResult(reply)
		if err != nil {
			return driver.ReleaseResult{}, err
		}
		b.notifyIfAsked(ctx, req, res, k)
		return res, nil
	})
}

// releasingProcess returns the release script's process arguments
// (lua/turns.lua): the notifier's id, and whether the process has waiters
// for the lock ("1") or not ("0").
// Both come boxed once (argNoProcess, argWaits, notifier.idArg): boxing a
// string for go-redis costs an allocation on every release otherwise.
func (b *Backend) releasingProcess(k lockKeys) (process, waits any) {
	if b.notifier == nil {
		return argNoProcess, argNoWaits
	}
	if b.notifier.waitingProcess(k.channel) != "" {
		return b.notifier.idArg, argWaits
	}
	return b.notifier.idArg, argNoWaits
}

// The release script's process arguments, boxed once.
var (
	argNoProcess any = ""
	argWaits     any = "1"
	argNoWaits   any = "0"
)

// releaseResult decodes the reply of the release script: the live holds
// left (or -1), alone or as the first element of {left, fence handed, 1
// when the release yielded to another process}.
func releaseResult(reply any) (res driver.ReleaseResult, handed int64, err error) {
	var left int64
	switch v := reply.(type) {
	case int64:
		left = v
	case []any:
		vals := make([]int64, len(v))
		for i, e := range v {
			n, ok := e.(int64)
			if !ok {
				return res, 0, fmt.Errorf("redisbackend: release script returned %v", reply)
			}
			vals[i] = n
		}
		if len(vals) < 2 || len(vals) > 3 {
			return res, 0, fmt.Errorf("redisbackend: release script returned %v", reply)
		}
		left, handed = vals[0], vals[1]
		res.Yielded = len(vals) == 3 && vals[2] == 1
	default:
		return res, 0, fmt.Errorf("redisbackend: release script returned %v", reply)
	}
	res.Held, res.Remaining = left >= 0, int(max(left, 0))
	return res, handed, nil
}

// notifyIfAsked wakes the watchers of the lock's releases when req asks for
// it (driver.ReleaseRequest.Notify) and res freed the lock or handed it
// on. The release script publishes only when an acquire was refused while
// the lock was held (so that an uncontended release costs no PUBLISH, which
// on Cluster reaches every node); a release with Notify, rare (an election's
// resignation), publishes in a second request (publishHint).
func (b *Backend) notifyIfAsked(ctx context.Context, req driver.ReleaseRequest, res driver.ReleaseResult, k lockKeys) {
	if !req.Notify || !res.Held || res.Remaining > 0 {
		return
	}
	b.publishHint(ctx, k.channel, "released")
}

// notifyAcquired wakes the change watchers of the lock (WatchRequest.Changes) when
// req asks for it (driver.Request.Notify) and res took the lock
// (not a re-entry), with an "acquired" message in a second request
// (publishHint): rare (an election's new leader), so the acquire script's
// fast path stays as it is. Release watchers ignore the message.
func (b *Backend) notifyAcquired(ctx context.Context, req driver.Request, res driver.Result, k lockKeys) {
	if !req.Notify || !res.Acquired || res.Holds != 1 {
		return
	}
	b.publishHint(ctx, k.channel, acquiredMessage)
}

// hintTimeout bounds a notification's PUBLISH.
const hintTimeout = time.Second

// publishHint publishes message on channel in the background, within
// hintTimeout (and go-redis's timeouts), and does not wait for it: a
// notification is a hint, and the request it follows is done. Waiting would
// let a server that stalls on the PUBLISH hold the caller past its
// deadline, and eat into the lease an acquisition was granted. If it is
// lost, the watchers' fallback timers cover it. Close waits for it.
func (b *Backend) publishHint(ctx context.Context, channel, message string) {
	ctx = context.WithoutCancel(ctx)
	b.calls.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, hintTimeout)
		defer cancel()
		_ = do1(ctx, b.tr, Command{Args: []any{"publish", channel, message}})
	})
}

// HandOff implements driver.Lines with the release script: one script run
// releases req and, when that frees the lock and no one else asked for it,
// takes it for next. With replica acknowledgement (WithReplicaAck) it
// releases only, and hands nothing over: an acquire there must be
// acknowledged by the replicas, which a release is not.
func (b *Backend) HandOff(ctx context.Context, req driver.ReleaseRequest, next driver.Request) (driver.ReleaseResult, driver.Result, error) {
	if req.Kind != driver.KindLock || next.Kind != driver.KindLock {
		return driver.ReleaseResult{}, driver.Result{}, fmt.Errorf("%w: redisbackend hands over plain locks only", driver.ErrUnsupported)
	}
	if b.ack != nil {
		res, err := b.releaseLock(ctx, req)
		return res, driver.Result{}, err
	}
	if err := b.checkRelease(req); err != nil {
		return driver.ReleaseResult{}, driver.Result{}, err
	}
	if next.Namespace != req.Namespace || next.Key != req.Key || next.Owner != next.Token || next.Token == "" {
		return driver.ReleaseResult{}, driver.Result{}, &driver.InvalidArgumentError{
			Name: "next", Value: fmt.Sprintf("%s/%s owner %q token %q", next.Namespace, next.Key, next.Owner, next.Token),
			Reason: "must name the released lock, with Owner equal to a non-empty Token"}
	}
	if err := checkLease("ttl", next.TTL); err != nil {
		return driver.ReleaseResult{}, driver.Result{}, err
	}
	k := keysFor(req.Namespace, req.Key)
	type both struct {
		rel driver.ReleaseResult
		acq driver.Result
	}
	r, err := guard(b, ctx, func(ctx context.Context) (both, error) {
		keys := append(k.releaseKeys(req.Token), k.tombstone(next.Token))
		process, waits := b.releasingProcess(k)
		args := []any{req.Token, k.channel, ms(max(req.Tombstone, 0)), ms(b.counterExpiry), process, waits, ms(b.turnGrace),
			next.Token, ms(next.TTL), max(next.FenceFloor, 0)}
		if next.Identity != "" {
			args = append(args, next.Identity)
		}
		reply, err := b.pipe.run(ctx, releaseScript, keys, args...).result()
		if err != nil {
			return both{}, classify(err)
		}
		if _, ok := reply.([]any); !ok {
			return both{}, fmt.Errorf("redisbackend: release script returned %v", reply)
		}
		rel, fence, err := releaseResult(reply)
		if err != nil {
			return both{}, err
		}
		r := both{rel: rel}
		if fence > 0 {
			r.acq = driver.Result{Acquired: true, Fence: fence, Holds: 1}
		}
		b.notifyIfAsked(ctx, req, r.rel, k)
		return r, nil
	})
	return r.rel, r.acq, err
}

// checkRelease refuses a release request the scripts cannot take.
func (b *Backend) checkRelease(req driver.ReleaseRequest) error {
	if b.optErr != nil {
		return b.optErr
	}
	if err := checkNames(req.Namespace, req.Key); err != nil {
		return err
	}
	if req.Tombstone > 0 {
		return checkLease("tombstone", req.Tombstone)
	}
	return nil
}

// renewLocks renews a batch of KindLock holds in one round trip (one per
// node on Cluster): one script run on a single node, a pipeline otherwise.
// The caller has checked the requests.
func (b *Backend) renewLocks(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	if b.singleGoRedis() && b.ack == nil && len(reqs) > 1 {
		return guard(b, ctx, func(ctx context.Context) ([]driver.RenewResult, error) {
			return b.renewMany(ctx, reqs)
		})
	}
	return b.renewBatch(ctx, reqs)
}

// renewCall is the script call that renews r: renewScript for a lock,
// holdsRenewScript for the holds of a semaphore or read-write lock.
func renewCall(r driver.RenewRequest) call {
	args := []any{r.Token, ms(r.TTL)}
	if r.Kind == driver.KindLock {
		return call{s: renewScript, keys: []string{lockKeyOf(r.Namespace, r.Key)}, args: args}
	}
	return call{s: holdsRenewScript, keys: holdKeysFor(r.Namespace, r.Key, holdKind(r.Kind)).renewKeys(), args: args}
}

// renewBatch renews a batch of holds of any kinds in one pipelined round
// trip (one per node on Cluster), each with its kind's script.
func (b *Backend) renewBatch(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	calls := make([]call, len(reqs))
	for i, r := range reqs {
		calls[i] = renewCall(r)
	}
	return guard(b, ctx, func(ctx context.Context) ([]driver.RenewResult, error) {
		if b.ack != nil {
			return b.renewAcked(ctx, calls), nil
		}
		results := make([]driver.RenewResult, len(reqs))
		for i, r := range b.scripts.runBatch(ctx, b.tr, calls) {
			n, err := r.int64()
			results[i] = driver.RenewResult{Held: err == nil && n == 1, Err: classify(err)}
			b.noteFailure(err)
		}
		return results, nil
	})
}

// renewMany renews a batch on a single node in one script run
// (renewManyScript). An error of the whole call (the server did not answer)
// is the batch's; a lock whose commands failed has its own.
func (b *Backend) renewMany(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	keys := make([]string, len(reqs))
	args := make([]any, 0, 2*len(reqs))
	// The locks of a batch mostly share their ttl: box it once per value
	// (an allocation per lock otherwise).
	var ttl time.Duration
	var ttlArg any
	for i, r := range reqs {
		keys[i] = lockKeyOf(r.Namespace, r.Key)
		if ttlArg == nil || r.TTL != ttl {
			ttl, ttlArg = r.TTL, ms(r.TTL)
		}
		args = append(args, r.Token, ttlArg)
	}
	vals, err := b.scripts.run(ctx, b.tr, renewManyScript, keys, args...).slice()
	if err != nil {
		return nil, classify(err)
	}
	if len(vals) != len(reqs) {
		return nil, fmt.Errorf("redisbackend: renewal script returned %d results for %d locks", len(vals), len(reqs))
	}
	results := make([]driver.RenewResult, len(reqs))
	for i, v := range vals {
		switch v := v.(type) {
		case int64:
			results[i].Held = v == 1
		case string:
			results[i].Err = fmt.Errorf("redisbackend: renewing %s: %s", keys[i], v)
		default:
			results[i].Err = fmt.Errorf("redisbackend: renewing %s: unexpected reply %v", keys[i], v)
		}
	}
	return results, nil
}

// lockTTL is TTL of a KindLock: ttlScript.
func (b *Backend) lockTTL(ctx context.Context, ref driver.Ref) (time.Duration, error) {
	k := keysFor(ref.Namespace, ref.Key)
	pttl, err := guard(b, ctx, func(ctx context.Context) (int64, error) {
		return b.pipe.run(ctx, ttlScript, []string{k.lock}, ref.Token).int64()
	})
	if err != nil {
		return 0, classify(err)
	}
	if pttl == -2 {
		return 0, driver.ErrNotHeld
	}
	return time.Duration(max(pttl, 0)) * time.Millisecond, nil
}

// Close stops release notifications and waits for requests that outlived
// their callers' contexts. It does not close the Redis client.
func (b *Backend) Close() error {
	var err error
	if b.notifier != nil {
		err = b.notifier.close()
	}
	b.calls.Wait()
	return err
}

// guard runs f, returning early with ctx's error when ctx ends first. go-redis
// bounds a request by its read and write timeouts, not by the context
// (unless ContextTimeoutEnabled is set), so without this a paused server
// would hold the caller past its deadline. A request abandoned this way
// finishes in the background within those timeouts (its result is dropped);
// Close waits for it. When none of f's commands had been written to a
// connection yet (go-redis was still dialing, or waiting for a pooled
// connection), none ever will be, and the error matches driver.ErrNotSent.
// A refusal of the client's credentials or permissions, by whichever of
// f's commands, matches driver.ErrMisconfigured (misconfigured).
//
// Returning early takes a goroutine that runs f while the caller waits, and
// that hand-over costs about as much client CPU as the request itself. It
// is skipped when go-redis enforces the deadline on its own (the client's
// ContextTimeoutEnabled, and a context with a deadline, which the Client's
// calls always have): see runInline.
func guard[T any](b *Backend, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, fmt.Errorf("%w: %w", driver.ErrNotSent, err)
	}
	if ctx.Done() == nil {
		val, err := f(ctx)
		b.noteFailure(err)
		return val, misconfigured(err)
	}
	if _, ok := ctx.Deadline(); (ok && b.contextDeadlines) || b.gr == nil {
		return runInline(b, ctx, f)
	}
	ctx, sent := withTracker(ctx)
	type result struct {
		val T
		err error
	}
	done := make(chan result, 1)
	b.calls.Go(func() {
		val, err := f(ctx)
		done <- result{val, err}
	})
	select {
	case r := <-done:
		b.noteFailure(r.err)
		return r.val, misconfigured(r.err)
	case <-ctx.Done():
		var zero T
		b.noteFailure(ctx.Err())
		if sent.abandon() {
			return zero, fmt.Errorf("%w: %w", driver.ErrNotSent, ctx.Err())
		}
		return zero, ctx.Err()
	}
}

// runInline runs f on the caller's goroutine, for a go-redis client that
// bounds each request by its context's deadline (ContextTimeoutEnabled): the
// call ends at the deadline, or at go-redis's read or write timeout if that
// comes first, without a goroutine to watch the context. A cancellation
// before the deadline is seen before the request is sent (go-redis checks
// the context while it waits for a connection) and once the reply is in,
// not in between: at most the deadline, usually a round trip, later.
//
// A Transport of NewTransport is always run this way: it returns when its
// context ends. It tracks no writes: whether a call cut short was sent is
// its error's to say (driver.ErrNotSent).
func runInline[T any](b *Backend, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	var sent *sendTracker
	if b.gr != nil {
		ctx, sent = withTracker(ctx)
	}
	val, err := f(ctx)
	if err == nil {
		b.noteFailure(nil)
		return val, nil
	}
	cerr := ctx.Err()
	if deadline, _ := ctx.Deadline(); cerr == nil && !time.Now().Before(deadline) {
		// go-redis's connection deadline, set from ctx, can pass a moment
		// before ctx's own timer fires.
		cerr = context.DeadlineExceeded
	}
	if cerr == nil {
		b.noteFailure(err)
		return val, misconfigured(err)
	}
	b.noteFailure(cerr)
	var zero T
	if sent != nil && sent.abandon() {
		return zero, fmt.Errorf("%w: %w", driver.ErrNotSent, cerr)
	}
	return zero, fmt.Errorf("%w (%w)", cerr, err)
}

// singleGoRedis reports whether the Backend runs on a go-redis client of
// one node (redis.Client), where one script can renew many locks.
func (b *Backend) singleGoRedis() bool {
	if b.gr == nil {
		return false
	}
	_, single := b.gr.rdb.(*redis.Client)
	return single
}

// enforcesContextDeadlines reports whether rdb bounds each request by its
// context's deadline (go-redis's ContextTimeoutEnabled option).
func enforcesContextDeadlines(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// ms converts a lease to whole milliseconds for PX, rounding up so that a
// lease is never shorter than asked. d must be checked by checkLease (or be
// zero): larger values would overflow.
func ms(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// checkLease refuses a duration that Redis cannot take as a lease: under a
// millisecond, or over driver.MaxTTL (the millisecond arithmetic of the
// scripts and of ms would overflow, and a negative PX deletes the key).
func checkLease(name string, d time.Duration) error {
	if d < time.Millisecond || d > driver.MaxTTL {
		return &driver.InvalidArgumentError{Name: name, Value: d,
			Reason: "must be between 1ms and " + driver.MaxTTL.String()}
	}
	return nil
}

// classify marks errors of requests that were certainly not sent (no
// connection could be had) with driver.ErrNotSent, so that the Client
// knows no clean-up is needed, and refusals of the client's credentials or
// permissions with driver.ErrMisconfigured (misconfigured), so that it
// does not retry them.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, driver.ErrNotSent) {
		return misconfigured(err) // marked by the transport already
	}
	var opErr *net.OpError
	if (errors.As(err, &opErr) && opErr.Op == "dial") ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("%w: %w", driver.ErrNotSent, err)
	}
	return misconfigured(err)
}

// noteFailure reacts to an error of a request. On Cluster, a master that
// does not answer may have failed over: go-redis refreshes its slot map on
// MOVED replies, but not on connection errors or timeouts (only about once
// a minute), so every request would go on failing against the dead master
// long after its replica took over. Each such failure asks go-redis for a
// reload, which it runs in the background, one at a time.
func (b *Backend) noteFailure(err error) {
	if b.gr == nil || err == nil {
		return
	}
	cc, ok := b.gr.rdb.(*redis.ClusterClient)
	if !ok || errors.Is(err, context.Canceled) {
		return
	}
	var reply redis.Error
	if errors.As(err, &reply) && !isFailoverReply(err) {
		return // the node answered: its slot map entry is fine
	}
	cc.ReloadState(context.Background())
}

// isFailoverReply reports error replies that a node sends while its shard
// is failing over or the cluster is reconfiguring. MOVED is among them: the
// ClusterClient reloads its map on a MOVED it sees itself, but requests with
// WithReplicaAck go to the master's own client (MasterForKey), where a
// MOVED from a demoted master would otherwise leave the map stale for a
// minute.
func isFailoverReply(err error) bool {
	for _, prefix := range []string{"MOVED", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING", "READONLY"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}
