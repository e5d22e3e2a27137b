package fencelock_test

// A store that refuses the client itself (a wrong password, none where one
// is required, a user its ACL denies what fencelock needs) is a
// configuration to fix, not an outage: every call fails at once with an
// error matching ErrMisconfigured, never ErrUnavailable, and nothing
// retries it. Against a real redis-server with ACL users.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// refusingRedis starts a redis-server whose default user needs the password
// "secret" (requirepass), with the user "locker" (password "right") allowed
// everything, and returns its address and an admin client that changes
// users (servertest.SetRedisUser).
func refusingRedis(t *testing.T) (addr string, admin *redis.Client) {
	t.Helper()
	srv := servertest.Redis(t)
	admin = servertest.RedisAdmin(t, srv)
	servertest.SetRedisUser(t, admin, "locker", "reset", "on", ">right", "~*", "&*", "+@all")
	servertest.SetRedisUser(t, admin, "default", "resetpass", ">secret")
	return srv.Addr(), admin
}

// redisAs returns a go-redis client of addr logged in as user with password
// (none when both are ""), closed at cleanup.
func redisAs(t *testing.T, addr, user, password string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: password,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// acquireEvents records the AcquireDone events of a Client.
type acquireEvents struct {
	mu     sync.Mutex
	events []fencelock.AcquireEvent
}

func (a *acquireEvents) hooks() fencelock.Hooks {
	return fencelock.Hooks{AcquireDone: func(_ context.Context, e fencelock.AcquireEvent) {
		a.mu.Lock()
		a.events = append(a.events, e)
		a.mu.Unlock()
	}}
}

func (a *acquireEvents) last() fencelock.AcquireEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.events) == 0 {
		return fencelock.AcquireEvent{}
	}
	return a.events[len(a.events)-1]
}

// checkRefused fails the test unless err is a refusal: it matches
// ErrMisconfigured, and neither ErrUnavailable nor ErrNotAcquired.
func checkRefused(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, fencelock.ErrMisconfigured) || errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrNotAcquired) {
		t.Errorf("%s: %v; want an error matching ErrMisconfigured only", what, err)
	}
}

// Every acquire, waiting or not, of every kind, stops at the first refusal
// (one attempt) with ErrMisconfigured, whatever its wait: a wrong
// password, none, a user denied the scripts, a user denied the keys.
// Check says so at start-up.
func TestMisconfiguredAcquireFailsAtOnce(t *testing.T) {
	addr, admin := refusingRedis(t)
	servertest.SetRedisUser(t, admin, "noscripts", "reset", "on", ">pw", "~*", "&*", "+@all", "-eval", "-evalsha", "-eval_ro", "-evalsha_ro")
	servertest.SetRedisUser(t, admin, "nokeys", "reset", "on", ">pw", "~other:*", "&*", "+@all")
	for _, tc := range []struct {
		name, user, password, reply string
		attempts                    int
	}{
		{"wrong password", "locker", "wrong", "WRONGPASS", 1},
		// Redis answers a command of more than 10 arguments sent before
		// logging in (a script call) with "ERR Protocol error:
		// unauthenticated multibulk length", and closes the connection;
		// go-redis finds it closed at its next use (EOF, a connection
		// error, retried as any). The calls here are one at a time, so
		// one such connection at most is idle in the pool.
		{"no password", "", "", "NOAUTH", 2},
		{"no scripts", "noscripts", "pw", "NOPERM", 1},
		{"no keys", "nokeys", "pw", "NOPERM", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ev acquireEvents
			c := newClient(t, redisAs(t, addr, tc.user, tc.password), fencelock.WithHooks(ev.hooks()))
			ctx := ctxTimeout(t, time.Minute)
			if err := c.Check(ctx); !redis.HasErrorPrefix(err, tc.reply) {
				t.Errorf("Check: %v; want the %s reply", err, tc.reply)
			} else {
				checkRefused(t, "Check", err)
			}
			for _, acq := range []struct {
				name string
				call func() (*fencelock.Lock, error)
			}{
				{"TryAcquire", func() (*fencelock.Lock, error) { return c.TryAcquire(ctx, "k", 10*time.Second) }},
				{"Acquire", func() (*fencelock.Lock, error) {
					return c.Acquire(ctx, "k", 10*time.Second, fencelock.WithWait(5*time.Second))
				}},
				{"Acquire without a bound", func() (*fencelock.Lock, error) { return c.Acquire(ctx, "k", 10*time.Second) }},
				{"Acquire WithFairness", func() (*fencelock.Lock, error) {
					return c.Acquire(ctx, "k", 10*time.Second, fencelock.WithFairness(), fencelock.WithWait(5*time.Second))
				}},
				{"Semaphore", func() (*fencelock.Lock, error) {
					return c.Semaphore("s", 2).Acquire(ctx, 10*time.Second, fencelock.WithWait(5*time.Second))
				}},
				{"AcquireWrite", func() (*fencelock.Lock, error) {
					return c.RWLock("rw").AcquireWrite(ctx, 10*time.Second, fencelock.WithWait(5*time.Second))
				}},
			} {
				lk, err := acq.call()
				if lk != nil {
					t.Fatalf("%s: acquired with refused credentials", acq.name)
				}
				checkRefused(t, acq.name, err)
				if e := ev.last(); e.Attempts < 1 || e.Attempts > tc.attempts || e.Outcome != "misconfigured" {
					t.Errorf("%s: %d attempts, outcome %v; want at most %d, outcome misconfigured", acq.name, e.Attempts, e.Outcome, tc.attempts)
				}
			}
		})
	}
}

// A held lock whose user loses its permissions: the next renewal is
// refused, and the lock is lost at once (ErrLost and ErrMisconfigured,
// reason "refused"), with no retry; TTL and Refresh are refused likewise; a
// Release refused is not retried in the background, so Close has nothing
// left to wait for.
func TestMisconfiguredRenewalAndRelease(t *testing.T) {
	addr, admin := refusingRedis(t)
	var mu sync.Mutex
	var lost []fencelock.LostEvent
	var failedRenewals int
	hooks := fencelock.Hooks{
		Lost: func(e fencelock.LostEvent) { mu.Lock(); lost = append(lost, e); mu.Unlock() },
		RenewalDone: func(e fencelock.RenewalEvent) {
			mu.Lock()
			failedRenewals += e.Failed
			mu.Unlock()
		},
	}
	c := fencelock.New(redisbackend.New(redisAs(t, addr, "locker", "right")), fencelock.WithHooks(hooks))
	t.Cleanup(func() { c.Close() })
	ctx := ctxTimeout(t, time.Minute)
	renewed, err := c.Acquire(ctx, "renewed", 10*time.Second, fencelock.WithAutoRenew(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	refreshed, err := c.Acquire(ctx, "refreshed", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	released, err := c.Acquire(ctx, "released", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	servertest.SetRedisUser(t, admin, "locker", "-eval", "-evalsha", "-eval_ro", "-evalsha_ro", "-hgetall") // HGETALL: Inspect

	// A lock whose refused renewals were retried (every 50ms) would end only
	// at its deadline (9s): the bound only keeps a broken test from hanging.
	waitDone(t, renewed.Done(), 30*time.Second, "the lock whose renewal was refused ends")
	if err := renewed.Err(); !errors.Is(err, fencelock.ErrLost) || !errors.Is(err, fencelock.ErrMisconfigured) {
		t.Errorf("Err of the lock whose renewal was refused: %v; want ErrLost and ErrMisconfigured", err)
	}
	// The hooks run in the goroutine that ended the lock, after Done.
	waitUntil(t, 30*time.Second, "the Lost and RenewalDone hooks", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(lost) > 0 && failedRenewals > 0
	})
	mu.Lock()
	if len(lost) != 1 || lost[0].Reason != "refused" {
		t.Errorf("Lost events %+v; want one, reason refused", lost)
	}
	if failedRenewals != 1 {
		t.Errorf("%d failed renewals; want 1 (the refusal, not retried)", failedRenewals)
	}
	mu.Unlock()

	_, err = refreshed.TTL(ctx)
	checkRefused(t, "TTL", err)
	checkRefused(t, "Refresh", refreshed.Refresh(ctx, 10*time.Second))
	_, err = c.Inspect(ctx, "released")
	checkRefused(t, "Inspect", err)
	checkRefused(t, "Release", released.Release(ctx))
	if err := released.Err(); !errors.Is(err, fencelock.ErrReleased) {
		t.Errorf("Err after the refused Release: %v; want ErrReleased", err)
	}
	// Nothing in the background: Close does not wait out its release
	// timeout for a release that cannot succeed.
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// A user denied the channels (Redis 7 gives new users none unless told
// &pattern): Check says so; a waiter, whose release notifications are
// refused, stops at once; and a release that has to notify waiters is
// refused (the script's PUBLISH).
func TestMisconfiguredChannels(t *testing.T) {
	addr, admin := refusingRedis(t)
	servertest.SetRedisUser(t, admin, "nochannels", "reset", "on", ">pw", "~*", "+@all")
	var ev acquireEvents
	holder := newClient(t, redisAs(t, addr, "nochannels", "pw"))
	waiter := newClient(t, redisAs(t, addr, "nochannels", "pw"), fencelock.WithHooks(ev.hooks()))
	ctx := ctxTimeout(t, time.Minute)
	checkRefused(t, "Check", holder.Check(ctx))

	lk, err := holder.TryAcquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatalf("TryAcquire (needs no channel): %v", err)
	}
	_, err = waiter.Acquire(ctx, "k", 10*time.Second, fencelock.WithWait(5*time.Second))
	checkRefused(t, "Acquire of a held lock", err)
	if e := ev.last(); e.Attempts != 1 || e.Outcome != "misconfigured" {
		t.Errorf("waiter: %d attempts, outcome %v; want 1, misconfigured", e.Attempts, e.Outcome)
	}
	checkRefused(t, "Release of a lock waited for", lk.Release(ctx))
}
