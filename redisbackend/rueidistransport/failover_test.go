package rueidistransport_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redisbackend/rueidistransport"
	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/rueidis"
)

// Locks across real failovers through rueidis clients, as redisbackend's
// failover tests run them through go-redis: a master killed with kill -9
// while a lock on it is held, on the Sentinel group (1 master, 2 replicas,
// 3 sentinels) and on a Cluster with a replica per master. The rueidis
// clients have their default options (client-side caching off); they
// follow a failover on their own: the Sentinel client by the sentinels'
// +switch-master, the Cluster client by reloading its slot map when a
// node's connection fails.
//
// The bounds are generous (a busy 2-core CI machine stretches a failover
// from 2-3 s to several times that); the tests log what they measured.

// failoverBound bounds a promotion, a rejoin, or a lock becoming available
// again after one.
const failoverBound = 30 * time.Second

// replicaAckTimeout is how long an acquire or renewal waits for a replica's
// acknowledgement in these tests: long enough for a busy machine, short
// against the leases.
const replicaAckTimeout = 500 * time.Millisecond

// failoverBed drives failovers of the master that serves a key, on either
// test bed.
type failoverBed interface {
	// kill kill -9s the master that serves redisKey.
	kill(redisKey string) (*redisserver.Server, error)
	waitFailover(old *redisserver.Server) (*redisserver.Server, error)
	// rejoin restarts old as a replica and waits until the bed is healthy.
	rejoin(old *redisserver.Server) error
	// client returns a new rueidis client of the bed, closed at cleanup.
	client(t *testing.T) rueidis.Client
}

type sentinelBed struct{ g *redisserver.SentinelGroup }

func (b sentinelBed) kill(string) (*redisserver.Server, error) { return b.g.KillMaster() }
func (b sentinelBed) waitFailover(old *redisserver.Server) (*redisserver.Server, error) {
	return b.g.WaitFailover(old, failoverBound)
}
func (b sentinelBed) rejoin(old *redisserver.Server) error {
	if err := b.g.Rejoin(old, failoverBound); err != nil {
		return err
	}
	return b.g.WaitReady(failoverBound)
}
func (b sentinelBed) client(t *testing.T) rueidis.Client {
	return newRueidis(t, rueidis.ClientOption{InitAddress: b.g.SentinelAddrs(),
		Sentinel: rueidis.SentinelOption{MasterSet: b.g.Name()}})
}

type clusterBed struct{ c *redisserver.Cluster }

func (b clusterBed) kill(redisKey string) (*redisserver.Server, error) {
	return b.c.KillMasterOf(redisKey)
}
func (b clusterBed) waitFailover(old *redisserver.Server) (*redisserver.Server, error) {
	return b.c.WaitFailover(old, failoverBound)
}
func (b clusterBed) rejoin(old *redisserver.Server) error {
	if err := b.c.Rejoin(old, failoverBound); err != nil {
		return err
	}
	return b.c.WaitOK(failoverBound)
}
func (b clusterBed) client(t *testing.T) rueidis.Client {
	return newRueidis(t, rueidis.ClientOption{InitAddress: b.c.Addrs()})
}

// newFailoverClient returns a fencelock Client on a Backend over tr (nil:
// the transport of a new rueidis client of bed), closed at cleanup.
func newFailoverClient(t *testing.T, bed failoverBed, tr redisbackend.Transport, opts ...redisbackend.Option) *fencelock.Client {
	t.Helper()
	if tr == nil {
		tr = rueidistransport.New(bed.client(t))
	}
	c := fencelock.New(redisbackend.NewTransport(tr, opts...))
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("closing fencelock client: %v", err)
		}
	})
	return c
}

// failoverCtx returns a context for a failover test, ended at cleanup.
func failoverCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// redisKey is the Redis key of a plain lock of the default namespace: the
// key a bed kills the master of.
func redisKey(key string) string { return fencelock.DefaultNamespace + ":{" + key + "}:lock" }

// acquired is the result of an acquire in the background.
type acquired struct {
	lk  *fencelock.Lock
	err error
	at  time.Time
}

// contend acquires key on c in the background, waiting up to bound, and
// reports the result with the time it returned.
func contend(ctx context.Context, c *fencelock.Client, key string, ttl, bound time.Duration) <-chan acquired {
	done := make(chan acquired, 1)
	go func() {
		lk, err := c.Acquire(ctx, key, ttl, fencelock.WithWait(bound))
		done <- acquired{lk, err, time.Now()}
	}()
	return done
}

// retryEvery paces the tests' retries of a call the rueidis client cannot
// serve until it has followed the failover: the client learns of the new
// master on its own, by no event a test can wait on.
const retryEvery = 20 * time.Millisecond

// A lock acquired with replica acknowledgement from every replica survives
// kill -9 of its master on a Sentinel group: once the promoted replica
// serves, another Client (without acknowledgement, so that a lock the
// failover lost would be granted to it at once) is refused the lock while
// the holder's lease runs, the holder renews it on the new master, and the
// acquisition after the holder's release has a fence above every earlier
// one.
//
// FENCELOCK_FAILOVERS=n runs n failovers instead of 2.
func TestSentinelFailoverWithReplicaAckKeepsLock(t *testing.T) {
	t.Parallel()
	bed := sentinelBed{servertest.RedisSentinelGroup(t)}
	// Every replica acknowledges: Sentinel may promote either.
	holder := newFailoverClient(t, bed, nil, redisbackend.WithReplicaAck(2, replicaAckTimeout))
	contender := newFailoverClient(t, bed, nil)
	ctx := failoverCtx(t)
	rounds := 2
	if n, err := strconv.Atoi(os.Getenv("FENCELOCK_FAILOVERS")); err == nil && n > 0 {
		rounds = n
	}
	// The holder's lease outlasts the failover, the contender's tries and
	// the rejoin together, each bounded by failoverBound: it must not
	// lapse before the holder renews it. The contender's locks are
	// released at once; their lease only has to outlast a busy machine's
	// scheduling delays.
	const key, ttl, shortTTL = "job", 4 * failoverBound, 10 * time.Second

	// Earlier acquisitions, whose fences the ones after a failover must
	// exceed.
	var highest int64
	for range 3 {
		lk, err := contender.TryAcquire(ctx, key, shortTTL)
		if err != nil {
			t.Fatal(err)
		}
		if lk.Fence() <= highest {
			t.Fatalf("fence %d not above the previous %d", lk.Fence(), highest)
		}
		highest = lk.Fence()
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	for round := range rounds {
		lk, err := holder.Acquire(ctx, key, ttl, fencelock.WithWait(failoverBound))
		if err != nil {
			t.Fatalf("round %d: holder's Acquire: %v", round, err)
		}
		if lk.Fence() <= highest {
			t.Errorf("round %d: holder's fence %d not above the earlier %d", round, lk.Fence(), highest)
		}
		highest = max(highest, lk.Fence())

		old, err := bed.kill(redisKey(key))
		if err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		promoted, err := bed.waitFailover(old)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %s promoted %v after kill -9 of %s", round, promoted.Addr(), time.Since(killed).Round(time.Millisecond), old.Addr())

		refusedWhileHeld(t, ctx, contender, key, lk)
		t.Logf("round %d: contender refused %v after the kill", round, time.Since(killed).Round(time.Millisecond))

		// The holder's replicas are both back before it renews: its
		// renewal needs the acknowledgement of two.
		if err := bed.rejoin(old); err != nil {
			t.Fatal(err)
		}
		refreshOnNewMaster(t, ctx, lk, ttl)

		if err := lk.Release(ctx); err != nil {
			t.Fatalf("round %d: holder's Release: %v", round, err)
		}
		next, err := contender.Acquire(ctx, key, shortTTL, fencelock.WithWait(failoverBound))
		if err != nil {
			t.Fatalf("round %d: contender's Acquire after the release: %v", round, err)
		}
		if next.Fence() <= highest {
			t.Errorf("round %d: fence %d after the failover, not above the earlier %d", round, next.Fence(), highest)
		}
		highest = next.Fence()
		if err := next.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// refusedWhileHeld retries c's TryAcquire of key until the store answers
// (up to failoverBound): the answer must be that lk's holder holds it,
// while lk still believes it does.
func refusedWhileHeld(t *testing.T, ctx context.Context, c *fencelock.Client, key string, lk *fencelock.Lock) {
	t.Helper()
	start := time.Now()
	every := time.NewTicker(retryEvery)
	defer every.Stop()
	for attempts := 1; ; attempts++ {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		got, err := c.TryAcquire(actx, key, time.Second)
		cancel()
		var refused *fencelock.NotAcquiredError
		switch {
		case err == nil:
			t.Fatalf("another Client took the lock (fence %d) after the failover while the holder's lease runs until %v (the failover lost it)",
				got.Fence(), lk.Deadline().Format(time.StampMilli))
		case errors.As(err, &refused) && !errors.Is(err, fencelock.ErrUnavailable):
			if !lk.Held() || lk.Err() != nil {
				t.Fatalf("the holder no longer believes it holds the lock (%v) when the other Client is refused", lk.Err())
			}
			t.Logf("refused after %d attempts: %v", attempts, err)
			return
		case !errors.Is(err, fencelock.ErrUnavailable):
			t.Fatalf("TryAcquire after the failover: %v, want ErrNotAcquired or ErrUnavailable", err)
		case time.Since(start) > failoverBound:
			t.Fatalf("the store did not answer TryAcquire within %v of the failover: %v", failoverBound, err)
		}
		<-every.C
	}
}

// refreshOnNewMaster renews lk with ttl, retrying while the store is
// unavailable or too few replicas acknowledge (up to failoverBound): the
// promoted replica must still hold lk.
func refreshOnNewMaster(t *testing.T, ctx context.Context, lk *fencelock.Lock, ttl time.Duration) {
	t.Helper()
	start := time.Now()
	every := time.NewTicker(retryEvery)
	defer every.Stop()
	for {
		err := lk.Refresh(ctx, ttl)
		switch {
		case err == nil:
			return
		case errors.Is(err, fencelock.ErrNotHeld):
			t.Fatalf("the holder's renewal on the new master: %v (the failover lost the lock)", err)
		case !errors.Is(err, fencelock.ErrUnavailable) && !errors.Is(err, fencelock.ErrNotReplicated):
			t.Fatalf("the holder's renewal on the new master: %v", err)
		case time.Since(start) > failoverBound:
			t.Fatalf("no renewal on the new master within %v: %v", failoverBound, err)
		}
		<-every.C
	}
}

// A release issued while the master is down leaves no ghost lock: it is
// retried in the background and lands on the promoted replica, and no
// renewal abandoned in the outage extends the lease afterwards, so a waiter
// has the key soon after the failover, long before the lease (60 s) would
// have ended on its own.
func TestReleaseDuringFailoverLeavesNoGhost(t *testing.T) {
	t.Parallel()
	for _, topo := range []struct {
		name  string
		start func(t *testing.T) failoverBed
	}{
		{"sentinel", func(t *testing.T) failoverBed { return sentinelBed{servertest.RedisSentinelGroup(t)} }},
		{"cluster", func(t *testing.T) failoverBed { return clusterBed{servertest.RedisClusterWithReplicas(t, 3)} }},
	} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			bed := topo.start(t)
			// With replica acknowledgement, the holder's renewals go
			// through DoOnMaster, which tr counts.
			tr := &countingTransport{Transport: rueidistransport.New(bed.client(t)), changed: make(chan struct{})}
			holder := newFailoverClient(t, bed, tr, redisbackend.WithReplicaAck(1, replicaAckTimeout))
			contender := newFailoverClient(t, bed, nil)
			ctx := failoverCtx(t)
			const key, ttl = "job", 60 * time.Second
			// Renewed often, so that renewals are in flight in the outage.
			lk, err := holder.Acquire(ctx, key, ttl, fencelock.WithAutoRenew(200*time.Millisecond), fencelock.WithWait(failoverBound))
			if err != nil {
				t.Fatal(err)
			}
			_, answered := tr.counts()
			tr.waitFor(t, "3 renewals answered", func(_, a int) bool { return a >= answered+3 })
			old, err := bed.kill(redisKey(key))
			if err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			started, _ := tr.counts()
			tr.waitFor(t, "a renewal sent after the kill", func(s, _ int) bool { return s > started })
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err = lk.Release(rctx)
			cancel()
			t.Logf("Release in the outage returned after %v: %v", time.Since(killed).Round(time.Millisecond), err)
			if lk.Held() {
				t.Errorf("lock still held after Release")
			}
			r := <-contend(ctx, contender, key, 10*time.Second, ttl/2)
			if r.err != nil {
				t.Fatalf("contender: no lock %v after the release (a ghost lock): %v", ttl/2, r.err)
			}
			t.Logf("contender had the lock %v after the kill -9", r.at.Sub(killed).Round(time.Millisecond))
			if r.lk.Fence() <= lk.Fence() {
				t.Errorf("contender's fence %d not above %d", r.lk.Fence(), lk.Fence())
			}
			// Nothing of the holder is left on the new master: no renewal
			// landed after the release.
			info, err := newBackend(t, bed.client(t)).Inspect(ctx, fencelock.DefaultNamespace, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Holds) != 1 || info.Holds[0].Token != r.lk.Token() {
				t.Errorf("holds on the new master: %+v, want only the contender's %s", info.Holds, r.lk.Token())
			}
			// Released before the rejoin, which a busy machine can
			// stretch beyond the contender's lease.
			if err := r.lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := bed.waitFailover(old); err != nil {
				t.Fatal(err)
			}
			if err := bed.rejoin(old); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// countingTransport counts the DoOnMaster calls of a Transport (with
// WithReplicaAck, the acquire and then the renewals of a held lock), so
// that a test waits for them.
type countingTransport struct {
	redisbackend.Transport

	mu                sync.Mutex
	started, answered int           // calls made, and calls whose every reply came without error
	changed           chan struct{} // closed at each change of the counts, then replaced
}

// DoOnMaster counts the call and its answer.
func (c *countingTransport) DoOnMaster(ctx context.Context, key string, cmds []redisbackend.Command) []redisbackend.Reply {
	c.note(func() { c.started++ })
	replies := c.Transport.DoOnMaster(ctx, key, cmds)
	for _, r := range replies {
		if r.Err != nil {
			return replies
		}
	}
	c.note(func() { c.answered++ })
	return replies
}

func (c *countingTransport) note(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *countingTransport) counts() (started, answered int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started, c.answered
}

// waitFor waits until cond holds of the counts, up to failoverBound.
func (c *countingTransport) waitFor(t *testing.T, what string, cond func(started, answered int) bool) {
	t.Helper()
	timeout := time.NewTimer(failoverBound)
	defer timeout.Stop()
	for {
		c.mu.Lock()
		ok, changed := cond(c.started, c.answered), c.changed
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			s, a := c.counts()
			t.Fatalf("%s: not within %v (%d calls, %d answered)", what, failoverBound, s, a)
		}
	}
}

// On a Cluster, a key is usable again soon after the master that served it
// is killed, with rueidis's default options: rueidis reloads its slot map
// when a node's connection fails or a command to it fails. The first
// acquire should come within 5 s of the kill; a busy machine can stretch
// the failover itself beyond that, so the test allows the cluster's own
// promotion time plus 3 s when that is longer.
func TestClusterAcquireSoonAfterFailover(t *testing.T) {
	t.Parallel()
	bed := clusterBed{servertest.RedisClusterWithReplicas(t, 3)}
	c := newFailoverClient(t, bed, nil)
	ctx := failoverCtx(t)
	const key, ttl = "job", 10 * time.Second
	lk, err := c.TryAcquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	before := lk.Fence()
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	old, err := bed.kill(redisKey(key))
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	promotedAt := make(chan time.Duration, 1)
	go func() {
		_, err := bed.waitFailover(old)
		if err != nil {
			t.Error(err)
		}
		promotedAt <- time.Since(killed)
	}()
	var first time.Duration
	attempts := 0
	every := time.NewTicker(retryEvery)
	defer every.Stop()
	for ; ; <-every.C {
		attempts++
		actx, cancel := context.WithTimeout(ctx, time.Second)
		lk, err = c.TryAcquire(actx, key, ttl)
		cancel()
		if err == nil {
			first = time.Since(killed)
			break
		}
		if time.Since(killed) > failoverBound {
			t.Fatalf("no acquire within %v of the kill: %v", failoverBound, err)
		}
	}
	promoted := <-promotedAt
	t.Logf("promotion seen %v after kill -9; first acquire %v after it (%d attempts)", promoted.Round(time.Millisecond), first.Round(time.Millisecond), attempts)
	if bound := max(5*time.Second, promoted+3*time.Second); first > bound {
		t.Errorf("first acquire %v after the kill, want within %v", first, bound)
	}
	if lk.Fence() <= before {
		t.Errorf("fence %d after the failover, not above %d before it", lk.Fence(), before)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := bed.rejoin(old); err != nil {
		t.Fatal(err)
	}
}
