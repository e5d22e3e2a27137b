package fencelock_test

// Real-server fault-injection tests of late replies, abandoned acquires,
// releases during outages and lost release replies: go-redis talks to a
// real redis-server through testing/faultproxy, which delays, stalls,
// drops or swallows the traffic on demand.
//
// Timing rules (the suite runs on a busy machine): the tests wait for
// conditions (the proxy holding a request, a key on the server, a script run
// counted in the server's slow log) rather than sleeping, and bound elapsed
// time only where the test is about it, by several seconds.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/faultproxy"
	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// outageLimit bounds the wait for a condition that should hold at once or
// within a round trip or two: generous, for a loaded machine.
const outageLimit = 10 * time.Second

// outageFreeBound is how soon after an outage ends a key whose holder gave it
// up must be free: well before the 10s lease that a landed renewal would give,
// and far before the 30s leases of the other tests.
const outageFreeBound = 5 * time.Second

// outageUnavailable reports whether err says the backend could not be
// reached.
func outageUnavailable(err error) bool { return errors.Is(err, fencelock.ErrUnavailable) }

// outageServer starts a private redis-server that records every command in
// its slow log, so that a test can count the lock scripts the server ran
// (outageScriptRuns), and returns it with a direct go-redis client.
func outageServer(t *testing.T) (*redisserver.Server, *redis.Client) {
	t.Helper()
	srv := servertest.Redis(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "100000")
	return srv, newRedisClient(t, srv.Addr())
}

// outageRetryingClient returns a go-redis client for addr with go-redis's
// default MaxRetries (3), as users run it, and 1s timeouts; closed at
// cleanup.
func outageRetryingClient(t *testing.T, addr string, hooks ...redis.Hook) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr:         addr,
		DialTimeout:  time.Second,
		ReadTimeout:  time.Second,
		WriteTimeout: time.Second,
	})
	for _, h := range hooks {
		rdb.AddHook(h)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// outageSplitClient returns a go-redis client (MaxRetries -1, 1s timeouts)
// whose first connection goes to first and every later one to rest. It
// opens the first connection with a PING. An acquire sent on that pooled
// connection can then be held back by the proxy at first while the clean-up
// release, which needs a connection of its own (the first one still waits
// for its reply), goes through rest: the release lands before the acquire.
func outageSplitClient(t *testing.T, first, rest string) *redis.Client {
	t.Helper()
	var dials atomic.Int64
	rdb := redis.NewClient(&redis.Options{
		Addr: rest,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			addr := rest
			if dials.Add(1) == 1 {
				addr = first
			}
			d := net.Dialer{Timeout: time.Second}
			return d.DialContext(ctx, network, addr)
		},
		DialTimeout:  time.Second,
		ReadTimeout:  time.Second,
		WriteTimeout: time.Second,
		MaxRetries:   -1,
	})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(ctxTimeout(t, outageLimit)).Err(); err != nil {
		t.Fatalf("PING through %s: %v", first, err)
	}
	return rdb
}

// outagePing opens a pooled connection (go-redis's handshake included), so
// that a fault armed next hits the command that follows, not the handshake.
func outagePing(t *testing.T, rdb *redis.Client) {
	t.Helper()
	if err := rdb.Ping(ctxTimeout(t, outageLimit)).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
}

// outagePoll calls cond every 10ms until it returns true (it reports true)
// or limit passes (false).
func outagePoll(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// outageWaitFor polls cond until it holds, failing the test after limit.
func outageWaitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !outagePoll(limit, cond) {
		t.Fatalf("%s: not within %v", what, limit)
	}
}

// Redis names of a lock's keys in the default namespace (redisbackend/keys.go).
func outageLockKey(key string) string  { return "lock:{" + key + "}:lock" }
func outageFenceKey(key string) string { return "lock:{" + key + "}:fence" }

// outageExists reports whether name exists on the server behind rdb.
func outageExists(t *testing.T, rdb *redis.Client, name string) bool {
	t.Helper()
	n, err := rdb.Exists(ctxTimeout(t, outageLimit), name).Result()
	if err != nil {
		t.Fatalf("EXISTS %s: %v", name, err)
	}
	return n == 1
}

// outageLocked reports whether the server holds the lock named key.
func outageLocked(t *testing.T, rdb *redis.Client, key string) bool {
	t.Helper()
	return outageExists(t, rdb, outageLockKey(key))
}

// outageTombstones returns the tombstone keys of the lock named key.
func outageTombstones(t *testing.T, rdb *redis.Client, key string) []string {
	t.Helper()
	names, err := rdb.Keys(ctxTimeout(t, outageLimit), "lock:{"+key+"}:tombstone:*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	return names
}

// outageKind names the lock script that a command with args (as sent, or as
// logged in the slow log) runs, by its number of keys and arguments
// (redisbackend/lua/): "acquire", "release", "renew", "ttl", or "" for
// anything else.
func outageKind(args []string) string {
	if len(args) < 4 {
		return ""
	}
	if name := strings.ToLower(args[0]); name != "eval" && name != "evalsha" {
		return ""
	}
	switch {
	case args[2] == "3":
		return "acquire"
	case args[2] == "5" && len(args) == 15: // lock, tombstone, the line of fair waiters, fence counter; 7 ARGV
		return "release"
	case args[2] == "1" && len(args) == 6:
		return "renew"
	case args[2] == "1" && len(args) == 5:
		return "ttl"
	}
	return ""
}

// outageCmdKind is outageKind for a go-redis command.
func outageCmdKind(cmd redis.Cmder) string {
	raw := cmd.Args()
	args := make([]string, len(raw))
	for i, a := range raw {
		args[i] = fmt.Sprint(a)
	}
	return outageKind(args)
}

// outageScriptRuns counts, in the slow log of a server started by
// outageServer, the runs of the kind of lock script on the lock named key:
// what the server executed, whatever the client believes it sent.
func outageScriptRuns(t *testing.T, rdb *redis.Client, kind, key string) int {
	t.Helper()
	entries, err := rdb.SlowLogGet(ctxTimeout(t, outageLimit), 100000).Result()
	if err != nil {
		t.Fatalf("SLOWLOG GET: %v", err)
	}
	n := 0
	for _, e := range entries {
		if outageKind(e.Args) == kind && e.Args[3] == outageLockKey(key) {
			n++
		}
	}
	return n
}

// outageTakeOver checks that another client can take the lock named key
// within outageLimit (so nothing keeps it locked), and releases it.
func outageTakeOver(t *testing.T, other *fencelock.Client, key string) {
	t.Helper()
	ctx := ctxTimeout(t, 2*outageLimit)
	var lastErr error
	if !outagePoll(outageLimit, func() bool {
		lk, err := other.TryAcquire(ctx, key, 10*time.Second)
		if err != nil {
			lastErr = err
			return false
		}
		if err := lk.Release(ctx); err != nil {
			t.Errorf("%q: releasing the other client's lock: %v", key, err)
		}
		return true
	}) {
		t.Errorf("%q: another client could not take the lock within %v: %v", key, outageLimit, lastErr)
	}
}

// outageHook is a go-redis hook that watches the lock scripts its client
// sends. A hook sees each call once, however often go-redis itself retries
// it inside. It looks at a command's arguments only once go-redis is done
// with it: the Redis backend takes the first read of a lock script's Args
// as the sign that go-redis is writing it (ErrNotSent otherwise).
type outageHook struct {
	pipelines  atomic.Int64 // pipelines sent: renewals, when nothing else runs concurrently
	renewalsOK atomic.Int64 // renewal pipelines that got their replies
	releasesOK atomic.Int64 // release scripts that got a reply

	mu             sync.Mutex
	onReleaseError func() // run (once) after the first release script that fails
}

func (h *outageHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *outageHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd) // go-redis sets cmd's error only after the hooks
		if outageCmdKind(cmd) == "release" {
			if err == nil && cmd.Err() == nil {
				h.releasesOK.Add(1)
			} else {
				h.mu.Lock()
				f := h.onReleaseError
				h.onReleaseError = nil
				h.mu.Unlock()
				if f != nil {
					f()
				}
			}
		}
		return err
	}
}

func (h *outageHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		err := next(ctx, cmds) // the connection is back in its pool
		if err == nil && len(cmds) > 0 && outageCmdKind(cmds[0]) == "renew" {
			h.renewalsOK.Add(1)
		}
		return err
	}
}

// outageAcquireResult is what a TryAcquire run in a goroutine returned.
type outageAcquireResult struct {
	lk  *fencelock.Lock
	err error
}

// outageAbandonedAcquire runs TryAcquire(key, 30s) on c and cancels its
// context once sent() reports that the request has gone out (the caller
// gives up while it is in flight). It checks the call's error: it must match
// ErrUnavailable (and the cancellation), and hand out no Lock.
func outageAbandonedAcquire(t *testing.T, c *fencelock.Client, key string, sent func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxTimeout(t, time.Minute))
	defer cancel()
	done := make(chan outageAcquireResult, 1)
	go func() {
		lk, err := c.TryAcquire(ctx, key, 30*time.Second)
		done <- outageAcquireResult{lk, err}
	}()
	outageWaitFor(t, outageLimit, "the acquire request sent", sent)
	cancel()
	var r outageAcquireResult
	select {
	case r = <-done:
	case <-time.After(outageLimit):
		t.Fatalf("TryAcquire did not return within %v of its context's end", outageLimit)
	}
	if r.lk != nil {
		r.lk.Release(context.Background())
		t.Fatalf("TryAcquire returned a Lock although its context ended before the reply (err %v)", r.err)
	}
	if !outageUnavailable(r.err) || !errors.Is(r.err, context.Canceled) {
		t.Errorf("TryAcquire cut short by its context: err = %v, want one matching ErrUnavailable and context.Canceled", r.err)
	}
}

// An acquire whose reply arrives after the lease it asked for has ended
// (ttl 150ms, replies delayed 300ms) must not become a held Lock, nor Do
// run fn under it: the lease is already over on the server. Each trial makes
// TryAcquire, Acquire (bounded by WithWait) and Do (bounded by its context)
// meet such late replies: none may return a Lock or run fn, their errors
// must say the backend did not answer in time (ErrUnavailable, not
// ErrNotAcquired: nobody else held the key), and another client must get
// each key afterwards.
func TestOutageLateAcquireReplyIsNotAHeldLock(t *testing.T) {
	t.Parallel()
	srv, rdb := startRedis(t)
	p := faultproxy.New(t, srv.Addr())
	c := newClient(t, newRedisClient(t, p.Addr()))
	other := newClient(t, rdb)
	ctx := ctxTimeout(t, 5*time.Minute)

	const ttl, delay, bound = 150 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond
	p.DelayReplies(delay)
	refused := func(call, key string, lk *fencelock.Lock, err error) {
		t.Helper()
		if lk != nil {
			t.Errorf("%s(%q): returned a Lock (Err() = %v) from a reply %v late for a %v lease", call, key, lk.Err(), delay, ttl)
			lk.Release(ctx)
		}
		if !outageUnavailable(err) || errors.Is(err, fencelock.ErrNotAcquired) {
			t.Errorf("%s(%q): err = %v, want one matching ErrUnavailable and not ErrNotAcquired", call, key, err)
		}
	}
	for trial := range 10 {
		tryKey := fmt.Sprintf("late-reply-try-%d", trial)
		lk, err := c.TryAcquire(ctx, tryKey, ttl)
		refused("TryAcquire", tryKey, lk, err)

		acquireKey := fmt.Sprintf("late-reply-acquire-%d", trial)
		lk, err = c.Acquire(ctx, acquireKey, ttl, fencelock.WithWait(bound))
		refused("Acquire", acquireKey, lk, err)

		doKey := fmt.Sprintf("late-reply-do-%d", trial)
		var ran atomic.Bool
		doCtx, cancel := context.WithTimeout(ctx, bound)
		err = c.Do(doCtx, doKey, ttl, func(context.Context, *fencelock.Lock) error {
			ran.Store(true)
			return nil
		})
		cancel()
		if ran.Load() {
			t.Errorf("Do(%q): ran fn under a lock whose reply came %v late for a %v lease (err %v)", doKey, delay, ttl, err)
		} else {
			refused("Do", doKey, nil, err)
		}

		for _, key := range []string{tryKey, acquireKey, doKey} {
			outageTakeOver(t, other, key)
		}
		if t.Failed() {
			t.Fatalf("failed in trial %d of 10", trial+1)
		}
	}
}

// An acquire that gives up while its request is in flight must not leave a
// hold for its whole ttl. Here the server applies the request
// (ttl 30s) and its reply is held back until the caller's context has
// ended; replies stay slow afterwards. The key must be free again within a
// few seconds, and another client must get it.
func TestOutageAbandonedAcquireIsReleased(t *testing.T) {
	srv, rdb := startRedis(t)
	p := faultproxy.New(t, srv.Addr())
	rdbP := newRedisClient(t, p.Addr())
	outagePing(t, rdbP)
	c := newClient(t, rdbP)
	other := newClient(t, rdb)
	const key = "abandoned-applied"

	resume := p.StallReplies()
	defer resume()
	outageAbandonedAcquire(t, c, key, func() bool { return outageLocked(t, rdb, key) })
	p.DelayReplies(300 * time.Millisecond)
	resume()
	gaveUp := time.Now()
	if !outagePoll(outageFreeBound, func() bool { return !outageLocked(t, rdb, key) }) {
		pttl := rdb.PTTL(ctxTimeout(t, outageLimit), outageLockKey(key)).Val()
		t.Fatalf("the abandoned acquire's hold is still there %v after the call gave up (lease left %v of 30s)", time.Since(gaveUp).Round(time.Millisecond), pttl)
	}
	p.DelayReplies(0)
	outageTakeOver(t, other, key)
}

// An acquire request held up in the network after its caller gave up (here
// 1.5s, and held by the proxy until the clean-up has landed, so that the
// order is certain on a loaded machine) must not take the lock for nobody
// for its whole ttl (30s) after the clean-up. The clean-up must leave a
// tombstone that makes the server refuse the late request: no hold, no fence
// minted, the key free for another client.
func TestOutageAbandonedAcquireLandingLateIsRefused(t *testing.T) {
	t.Parallel()
	srv, rdb := outageServer(t)
	slow := faultproxy.New(t, srv.Addr()) // the connection the acquire goes on
	fast := faultproxy.New(t, srv.Addr()) // every later one: the clean-up's
	c := newClient(t, outageSplitClient(t, slow.Addr(), fast.Addr()))
	other := newClient(t, rdb)
	const key = "abandoned-late"

	slow.DelayRequests(1500 * time.Millisecond)
	resume := slow.StallRequests()
	defer resume()
	outageAbandonedAcquire(t, c, key, func() bool { return slow.Buffered() > 0 })
	outageWaitFor(t, outageLimit, "the clean-up release's tombstone", func() bool {
		return len(outageTombstones(t, rdb, key)) > 0
	})
	resume()
	outageWaitFor(t, outageLimit, "the late acquire request reaching the server", func() bool {
		return outageScriptRuns(t, rdb, "acquire", key) > 0
	})
	if outageLocked(t, rdb, key) {
		pttl := rdb.PTTL(ctxTimeout(t, outageLimit), outageLockKey(key)).Val()
		t.Errorf("the late acquire request took the lock for nobody (lease left %v of 30s)", pttl)
	}
	if outageExists(t, rdb, outageFenceKey(key)) {
		t.Errorf("the late acquire request minted a fence: it was applied, not refused")
	}
	outageTakeOver(t, other, key)
}

// Close must not cut the clean-up of an abandoned acquire short, or an
// acquire request still on its way would take the lock for nobody for its
// whole ttl (30s). Close is called right after the failed call, while the
// clean-up cannot reach the server yet (connections refused): it must wait
// for the clean-up (and report no unconfirmed release), and the acquire
// request that lands afterwards must find the key guarded and leave it free.
func TestOutageCloseFinishesAbandonedAcquireCleanup(t *testing.T) {
	t.Parallel()
	srv, rdb := outageServer(t)
	slow := faultproxy.New(t, srv.Addr())
	fast := faultproxy.New(t, srv.Addr())
	c := fencelock.New(redisbackend.New(outageSplitClient(t, slow.Addr(), fast.Addr())))
	t.Cleanup(func() { c.Close() })
	other := newClient(t, rdb)
	const key = "abandoned-close"

	resume := slow.StallRequests()
	defer resume()
	fast.Refuse(true)
	outageAbandonedAcquire(t, c, key, func() bool { return slow.Buffered() > 0 })
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	outageWaitFor(t, outageLimit, "a clean-up attempt refused", func() bool { return fast.Refused() > 0 })
	fast.Refuse(false)
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close = %v, want nil: it must finish the clean-up release once the server is reachable", err)
		}
	case <-time.After(2 * outageLimit):
		t.Fatalf("Close did not return within %v", 2*outageLimit)
	}
	resume()
	outageWaitFor(t, outageLimit, "the late acquire request reaching the server", func() bool {
		return outageScriptRuns(t, rdb, "acquire", key) > 0
	})
	if outageLocked(t, rdb, key) {
		pttl := rdb.PTTL(ctxTimeout(t, outageLimit), outageLockKey(key)).Val()
		t.Errorf("after Close, the abandoned acquire holds the lock for nobody (lease left %v of 30s)", pttl)
	}
	outageTakeOver(t, other, key)
}

// During a server outage, Release must not wait behind the renewal in
// flight until its context ends (with a context without deadline, for as
// long as go-redis keeps retrying) and then never send the release, while
// go-redis re-sends the abandoned renewal later, which would renew the lock
// on the recovered server and keep the key locked by nobody.
//
// For each kind of outage (the network frozen and then delivering what it
// held, the network swallowing everything, the server process stopped), a
// lock (ttl 10s, renewed every second, through a go-redis client with its
// default retries) is released while a renewal is in flight: Release must
// return within a few seconds, with an error matching ErrUnavailable, and
// once the outage ends a release (not the lease running out) must free the
// key within 5s, well before the 10s a landed renewal would keep it, and the
// key must stay free.
func TestOutageReleaseDuringOutage(t *testing.T) {
	t.Parallel()
	const (
		ttl          = 10 * time.Second
		interval     = time.Second
		releaseBound = 6 * time.Second // two release attempts of at most 1s each, and slack
	)
	outages := []struct {
		name string
		// lands: the requests sent during the outage reach the server
		// afterwards, the abandoned renewal among them.
		lands bool
		start func(srv *redisserver.Server, p *faultproxy.Proxy) (end func() error)
	}{
		{"stall", true, func(_ *redisserver.Server, p *faultproxy.Proxy) func() error {
			resume := p.Stall()
			return func() error { resume(); return nil }
		}},
		{"blackhole", false, func(_ *redisserver.Server, p *faultproxy.Proxy) func() error {
			p.Blackhole(true)
			return func() error { p.Blackhole(false); return nil }
		}},
		{"pause", true, func(srv *redisserver.Server, _ *faultproxy.Proxy) func() error {
			if err := srv.Pause(); err != nil {
				return func() error { return err }
			}
			return srv.Resume
		}},
	}
	for _, o := range outages {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			srv, rdb := outageServer(t)
			p := faultproxy.New(t, srv.Addr())
			hook := &outageHook{}
			c := newClient(t, outageRetryingClient(t, p.Addr(), hook))
			other := newClient(t, rdb)
			ctx := ctxTimeout(t, time.Minute)
			const key = "outage-release"

			// The release script announces on this channel that it freed
			// the key; the lease running out does not.
			sub := rdb.Subscribe(ctx, "lock:{"+key+"}:released")
			t.Cleanup(func() { sub.Close() })
			if _, err := sub.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			freed := sub.Channel()

			lk, err := c.Acquire(ctx, key, ttl, fencelock.WithAutoRenew(interval))
			if err != nil {
				t.Fatal(err)
			}
			// A refused acquire, as a waiter's: the release publishes only
			// then.
			if _, err := other.TryAcquire(ctx, key, ttl); !errors.Is(err, fencelock.ErrNotAcquired) {
				t.Fatalf("other's TryAcquire: %v, want ErrNotAcquired", err)
			}
			// One renewal before the outage: go-redis then has a pooled
			// connection for renewals (a pipeline pool of its own), so the
			// renewal during the outage is written at once, rather than
			// waiting for a new connection's handshake.
			outageWaitFor(t, outageLimit, "a renewal before the outage", func() bool {
				return hook.renewalsOK.Load() > 0
			})
			renewed := outageScriptRuns(t, rdb, "renew", key)
			end := o.start(srv, p)
			// Any renewal sent from now on meets the outage. (The lock's
			// renewals are the only pipelines its client sends.)
			sent := hook.pipelines.Load()
			var endOnce sync.Once
			endOutage := func() {
				endOnce.Do(func() {
					if err := end(); err != nil {
						t.Errorf("ending the outage: %v", err)
					}
				})
			}
			defer endOutage()
			outageWaitFor(t, outageLimit, "a renewal sent during the outage", func() bool {
				return hook.pipelines.Load() > sent
			})

			released := make(chan error, 1)
			start := time.Now()
			go func() { released <- lk.Release(context.Background()) }()
			select {
			case err = <-released:
			case <-time.After(releaseBound):
				t.Fatalf("Release with a context without deadline still running after %v of outage", releaseBound)
			}
			took := time.Since(start)
			if !outageUnavailable(err) {
				t.Errorf("Release during the outage (%v): err = %v, want one matching ErrUnavailable", took.Round(time.Millisecond), err)
			}
			if lerr := lk.Err(); !errors.Is(lerr, fencelock.ErrReleased) {
				t.Errorf("after Release: lk.Err() = %v, want ErrReleased", lerr)
			}

			endOutage()
			select {
			case <-freed:
			case <-time.After(outageFreeBound):
				pttl := rdb.PTTL(ctx, outageLockKey(key)).Val()
				t.Fatalf("no release freed the key within %v after the outage ended (lease left %v)", outageFreeBound, pttl)
			}
			if outageLocked(t, rdb, key) {
				t.Fatalf("the key is locked although its release was announced")
			}
			// No request held up by the outage (a renewal in particular)
			// may lock it again: watch it for two renewal intervals.
			if outagePoll(2*interval, func() bool { return outageLocked(t, rdb, key) }) {
				pttl := rdb.PTTL(ctx, outageLockKey(key)).Val()
				t.Fatalf("the key was locked again after the outage (lease left %v)", pttl)
			}
			if n := outageScriptRuns(t, rdb, "renew", key) - renewed; o.lands && n == 0 {
				t.Errorf("the renewal held up by the outage never reached the server: the test did not exercise a late renewal")
			}
			outageTakeOver(t, other, key)
		})
	}
}

// go-redis re-sends a script after a network error on a new connection
// (MaxRetries defaults to 3), so a request the Client has given up on
// could take effect later, or twice.
// With go-redis's default retries, an acquire and a renewal whose replies
// are lost (the server applied them, the connection was reset) must run
// exactly once on the server, and the calls must report ErrUnavailable
// rather than the result of a hidden second run.
func TestOutageLockScriptsRunOnce(t *testing.T) {
	setup := func(t *testing.T) (*faultproxy.Proxy, *redis.Client, *redis.Client, *fencelock.Client) {
		srv, rdb := outageServer(t)
		p := faultproxy.New(t, srv.Addr())
		rdbP := outageRetryingClient(t, p.Addr())
		return p, rdb, rdbP, newClient(t, rdbP)
	}

	t.Run("acquire", func(t *testing.T) {
		p, rdb, rdbP, c := setup(t)
		other := newClient(t, rdb)
		ctx := ctxTimeout(t, time.Minute)
		const key = "once-acquire"

		outagePing(t, rdbP)
		p.DropNextReply()
		lk, err := c.TryAcquire(ctx, key, 10*time.Second)
		if got := p.RepliesDropped(); got != 1 {
			t.Fatalf("RepliesDropped() = %d, want 1 (the acquire's reply)", got)
		}
		if lk != nil {
			t.Errorf("TryAcquire whose reply was lost returned a Lock: go-redis must have run the acquire again")
			lk.Release(ctx)
		}
		if !outageUnavailable(err) {
			t.Errorf("TryAcquire whose reply was lost: err = %v, want one matching ErrUnavailable", err)
		}
		if n := outageScriptRuns(t, rdb, "acquire", key); n != 1 {
			t.Errorf("the server ran the acquire script %d times, want 1", n)
		}
		outageTakeOver(t, other, key) // the clean-up released the hold it made
	})

	t.Run("renew", func(t *testing.T) {
		p, rdb, rdbP, c := setup(t)
		ctx := ctxTimeout(t, time.Minute)
		const key = "once-renew"

		lk, err := c.TryAcquire(ctx, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.Refresh(ctx, 10*time.Second); err != nil { // loads the script
			t.Fatal(err)
		}
		before := outageScriptRuns(t, rdb, "renew", key)
		outagePing(t, rdbP)
		p.DropNextReply()
		err = lk.Refresh(ctx, 10*time.Second)
		if got := p.RepliesDropped(); got != 1 {
			t.Fatalf("RepliesDropped() = %d, want 1 (the renewal's reply)", got)
		}
		if !outageUnavailable(err) {
			t.Errorf("Refresh whose reply was lost: err = %v, want one matching ErrUnavailable", err)
		}
		if n := outageScriptRuns(t, rdb, "renew", key) - before; n != 1 {
			t.Errorf("the server ran the renewal script %d times, want 1", n)
		}
		if err := lk.Release(ctx); err != nil {
			t.Errorf("Release after the failed Refresh: %v", err)
		}
	})
}

// A release that the server applied but whose reply was lost is re-sent by
// go-redis and finds nothing to release; reported as ErrNotHeld, it would
// make the Lock ErrLost and Do return ErrLost although fn ran under a valid
// lock. With go-redis's default retries, such a release must be reported
// as done: Release returns nil and the Lock is released,
// not lost; Do returns fn's nil. When the server cannot be reached to
// confirm it (or at all), Release returns ErrUnavailable and the Client
// releases in the background once the server is reachable.
func TestOutageReleaseReplyLost(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*faultproxy.Proxy, *redis.Client, *outageHook, *fencelock.Client, *fencelock.Client) {
		srv, rdb := startRedis(t)
		p := faultproxy.New(t, srv.Addr())
		hook := &outageHook{}
		c := newClient(t, outageRetryingClient(t, p.Addr(), hook))
		return p, rdb, hook, c, newClient(t, rdb)
	}
	checkReleased := func(t *testing.T, lk *fencelock.Lock) {
		t.Helper()
		if err := lk.Err(); !errors.Is(err, fencelock.ErrReleased) || errors.Is(err, fencelock.ErrLost) {
			t.Errorf("lk.Err() = %v, want ErrReleased, not ErrLost", err)
		}
	}

	t.Run("Release", func(t *testing.T) {
		t.Parallel()
		p, rdb, _, c, other := setup(t)
		ctx := ctxTimeout(t, time.Minute)
		const key = "lost-release-reply"
		lk, err := c.TryAcquire(ctx, key, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		p.DropNextReply()
		err = lk.Release(ctx)
		if got := p.RepliesDropped(); got != 1 {
			t.Fatalf("RepliesDropped() = %d, want 1 (the release's reply)", got)
		}
		if err != nil {
			t.Errorf("Release whose reply was lost: %v, want nil (the server released it)", err)
		}
		checkReleased(t, lk)
		if outageLocked(t, rdb, key) {
			t.Errorf("the key is still locked after the release")
		}
		outageTakeOver(t, other, key)
	})

	t.Run("Do", func(t *testing.T) {
		t.Parallel()
		p, rdb, _, c, other := setup(t)
		ctx := ctxTimeout(t, time.Minute)
		const key = "lost-release-reply-do"
		var ran bool
		err := c.Do(ctx, key, 30*time.Second, func(context.Context, *fencelock.Lock) error {
			ran = true
			p.DropNextReply() // the next reply is the release's
			return nil
		})
		if !ran {
			t.Fatalf("Do did not run fn: %v", err)
		}
		if got := p.RepliesDropped(); got != 1 {
			t.Fatalf("RepliesDropped() = %d, want 1 (the release's reply)", got)
		}
		if err != nil {
			t.Errorf("Do whose release reply was lost = %v, want fn's nil", err)
		}
		if outageLocked(t, rdb, key) {
			t.Errorf("the key is still locked after Do")
		}
		outageTakeOver(t, other, key)
	})

	// The first request is applied but its reply lost; the second, which
	// would have confirmed it, cannot reach the server (the network swallows
	// everything from then on).
	t.Run("reply lost, then unreachable", func(t *testing.T) {
		t.Parallel()
		p, rdb, hook, c, other := setup(t)
		ctx := ctxTimeout(t, time.Minute)
		const key = "lost-release-reply-unreachable"
		lk, err := c.TryAcquire(ctx, key, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		hook.mu.Lock()
		hook.onReleaseError = func() { p.Blackhole(true) }
		hook.mu.Unlock()
		defer p.Blackhole(false)
		p.DropNextReply()
		err = lk.Release(ctx)
		if got := p.RepliesDropped(); got != 1 {
			t.Fatalf("RepliesDropped() = %d, want 1 (the release's reply)", got)
		}
		if !outageUnavailable(err) {
			t.Errorf("Release not confirmed: err = %v, want one matching ErrUnavailable", err)
		}
		checkReleased(t, lk)
		confirmed := hook.releasesOK.Load()
		p.Blackhole(false)
		outageWaitFor(t, outageLimit, "the background release confirmed", func() bool {
			return hook.releasesOK.Load() > confirmed
		})
		if outageLocked(t, rdb, key) {
			t.Errorf("the key is still locked after the release was applied and confirmed")
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close = %v, want nil (no release left unconfirmed)", err)
		}
		outageTakeOver(t, other, key)
	})

	// Neither request reaches the server: the lock is still there when
	// Release returns, and only the background release can free it before
	// its 30s lease ends.
	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		p, rdb, _, c, other := setup(t)
		ctx := ctxTimeout(t, time.Minute)
		const key = "unreachable-release"
		lk, err := c.TryAcquire(ctx, key, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		p.Blackhole(true)
		defer p.Blackhole(false)
		err = lk.Release(ctx)
		if !outageUnavailable(err) {
			t.Errorf("Release with the server unreachable: err = %v, want one matching ErrUnavailable", err)
		}
		checkReleased(t, lk)
		if !outageLocked(t, rdb, key) {
			t.Fatalf("the key is free although no release could reach the server")
		}
		p.Blackhole(false)
		reachable := time.Now()
		if !outagePoll(outageFreeBound, func() bool { return !outageLocked(t, rdb, key) }) {
			pttl := rdb.PTTL(ctx, outageLockKey(key)).Val()
			t.Fatalf("the key is still locked %v after the server became reachable (lease left %v of 30s): no background release",
				time.Since(reachable).Round(time.Millisecond), pttl)
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close = %v, want nil (no release left unconfirmed)", err)
		}
		outageTakeOver(t, other, key)
	})
}
