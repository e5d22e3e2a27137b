package redlock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redlock"
	"github.com/fencelock/fencelock/testing/leaktest"
	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	leaktest.Main(m)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// masters starts n independent redis-servers and returns them with a
// go-redis client of each (requests bounded by their context's deadline,
// no retries: the backend decides).
func masters(t *testing.T, n int) ([]*redisserver.Server, []redis.UniversalClient) {
	t.Helper()
	servers := make([]*redisserver.Server, n)
	clients := make([]redis.UniversalClient, n)
	for i := range n {
		servers[i] = servertest.Redis(t)
		rdb := redis.NewClient(&redis.Options{Addr: servers[i].Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
			DialTimeout: 200 * time.Millisecond, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
		t.Cleanup(func() { rdb.Close() })
		clients[i] = rdb
	}
	return servers, clients
}

func newRedlock(t *testing.T, clients []redis.UniversalClient, opts ...redlock.Option) *redlock.Backend {
	t.Helper()
	b, err := redlock.New(clients, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An even number of masters, or none, is refused: two majorities of an
// even number need not share a master.
func TestNewRefusesEvenMasters(t *testing.T) {
	_, clients := masters(t, 2)
	for _, cs := range [][]redis.UniversalClient{nil, clients} {
		if _, err := redlock.New(cs); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("New with %d masters: %v, want ErrInvalidArgument", len(cs), err)
		}
	}
}

// With 2 of 5 masters killed every acquire and release still succeeds; with
// 3 killed, an acquire fails within its wait with an error that says no
// quorum answered and names the masters that failed.
func TestMinorityDownMajorityDown(t *testing.T) {
	servers, clients := masters(t, 5)
	c := fencelock.New(newRedlock(t, clients))
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, s := range servers[:2] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	var last int64
	for range 20 {
		lk, err := c.Acquire(ctx, "k", 10*time.Second, fencelock.WithWait(5*time.Second))
		if err != nil {
			t.Fatalf("acquire with 2 of 5 masters down: %v", err)
		}
		if lk.Fence() <= last {
			t.Fatalf("fence %d after %d", lk.Fence(), last)
		}
		last = lk.Fence()
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("release with 2 of 5 masters down: %v", err)
		}
	}

	if err := servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := c.Acquire(ctx, "k", 10*time.Second, fencelock.WithWait(3*time.Second))
	if !errors.Is(err, fencelock.ErrUnavailable) || !errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("acquire with 3 of 5 masters down: %v, want ErrUnavailable and redlock.ErrNoQuorum", err)
	}
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || len(qe.Errs) != 3 {
		t.Fatalf("quorum error %+v, want the 3 masters that failed", qe)
	}
	if waited := time.Since(start); waited > 20*time.Second {
		t.Fatalf("the acquire took %v to give up, want about its 3s wait", waited)
	}
}

// Fences strictly increase over 500 acquisitions while random minorities
// of masters are killed and restarted (without persistence: they come back
// empty, and their clock in µs floors the counter they forgot).
func TestFencesIncreaseAcrossRestarts(t *testing.T) {
	servers, clients := masters(t, 5)
	c := fencelock.New(newRedlock(t, clients))
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(1, 2))
	down := map[int]bool{}
	var last int64
	for i := range 500 {
		if i%50 == 0 {
			// Restart the masters that are down, then kill another minority.
			for j := range down {
				if err := servers[j].Restart(); err != nil {
					t.Fatal(err)
				}
				delete(down, j)
			}
			for _, j := range rng.Perm(5)[:rng.IntN(3)] {
				if err := servers[j].Kill(); err != nil {
					t.Fatal(err)
				}
				down[j] = true
			}
		}
		lk, err := c.Acquire(ctx, "k", 10*time.Second, fencelock.WithWait(10*time.Second))
		if err != nil {
			t.Fatalf("acquisition %d with masters %v down: %v", i, keys(down), err)
		}
		if lk.Fence() <= last {
			t.Fatalf("acquisition %d: fence %d after %d (masters %v down)", i, lk.Fence(), last, keys(down))
		}
		last = lk.Fence()
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
}

func keys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Two Clients contend for one key while a master is paused (SIGSTOP) and
// resumed: never two holders at once, fences rising.
func TestPausedMasterNoDoubleGrant(t *testing.T) {
	servers, clients := masters(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		inside atomic.Int32
		mu     sync.Mutex
		last   int64
		wg     sync.WaitGroup
		stop   atomic.Bool
		turns  atomic.Int64
	)
	for range 2 {
		c := fencelock.New(newRedlock(t, clients))
		t.Cleanup(func() { c.Close() })
		wg.Go(func() {
			for !stop.Load() {
				lk, err := c.Acquire(ctx, "k", 5*time.Second, fencelock.WithWait(20*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				mu.Lock()
				if lk.Fence() <= last {
					t.Errorf("fence %d after %d", lk.Fence(), last)
				}
				last = lk.Fence()
				mu.Unlock()
				turns.Add(1)
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := lk.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	// Turns before the pause, while the paused master holds back every
	// reply (the other four are a majority), and once its late replies
	// have come.
	turnsTaken := func(what string, n int64) {
		t.Helper()
		from := turns.Load()
		waitUntil(t, ctx, what, func() bool { return turns.Load() >= from+n })
	}
	turnsTaken("turns before the pause", 20)
	if err := servers[0].Pause(); err != nil {
		t.Fatal(err)
	}
	turnsTaken("turns while a master is paused", 10)
	if err := servers[0].Resume(); err != nil {
		t.Fatal(err)
	}
	turnsTaken("turns after the master resumed", 20)
	stop.Store(true)
	wg.Wait()
}

// Acquire and Renew report the validity (ttl less drift), and the Client's
// deadline ends its safety margin before it.
func TestValidityReported(t *testing.T) {
	_, clients := masters(t, 3)
	b := newRedlock(t, clients)
	c := fencelock.New(b)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	const ttl = 10 * time.Second
	if want := ttl - ttl/100 - 2*time.Millisecond; b.Validity(ttl) != want {
		t.Fatalf("Validity(%v) = %v, want %v", ttl, b.Validity(ttl), want)
	}
	before := time.Now()
	lk, err := c.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	defer lk.Release(ctx)
	// The default safety margin is 10% of the lease counted on, from when
	// the request was sent (between before and after).
	local := b.Validity(ttl) * 9 / 10
	if d := lk.Deadline(); d.Before(before.Add(local)) || d.After(after.Add(local)) {
		t.Fatalf("deadline %v after the acquire began (it took %v), want 90%% of the validity, %v", d.Sub(before), after.Sub(before), local)
	}
	res, err := b.Renew(ctx, []driver.RenewRequest{{Ref: driver.Ref{Namespace: fencelock.DefaultNamespace, Key: "k", Token: lk.Token()}, TTL: ttl}})
	if err != nil || len(res) != 1 || !res[0].Held || res[0].Validity != b.Validity(ttl) {
		t.Fatalf("renew: %+v %v, want held with validity %v", res, err, b.Validity(ttl))
	}
}
