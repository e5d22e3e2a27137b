package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// Locks across real failovers: a master killed with
// kill -9 while a lock on it is held, on the Sentinel group (1 master, 2
// replicas, 3 sentinels) and on a Cluster with a replica per master, through
// go-redis clients with their default options, as users run them.
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

// replicated drives failovers of the master that serves a key, on either
// test bed.
type replicated interface {
	// stall stops the replicas of the master that serves key, so that
	// writes from now on are only on that master (forced lag).
	stall(key string) error
	resume() error
	// kill kill -9s the master that serves key.
	kill(key string) (*redisserver.Server, error)
	waitFailover(old *redisserver.Server) (*redisserver.Server, error)
	rejoin(old *redisserver.Server) error
	// client returns a new go-redis client with default options.
	client(t *testing.T) redis.UniversalClient
}

type sentinelBed struct{ g *redisserver.SentinelGroup }

func (b sentinelBed) stall(string) error { _, err := b.g.StallReplicas(); return err }
func (b sentinelBed) resume() error      { return b.g.ResumeReplicas() }
func (b sentinelBed) kill(string) (*redisserver.Server, error) {
	return b.g.KillMaster()
}
func (b sentinelBed) waitFailover(old *redisserver.Server) (*redisserver.Server, error) {
	return b.g.WaitFailover(old, failoverBound)
}
func (b sentinelBed) rejoin(old *redisserver.Server) error {
	if err := b.g.Rejoin(old, failoverBound); err != nil {
		return err
	}
	return b.g.WaitReady(failoverBound)
}
func (b sentinelBed) client(t *testing.T) redis.UniversalClient {
	return servertest.FailoverClient(t, b.g)
}

type clusterBed struct{ c *redisserver.Cluster }

func (b clusterBed) stall(key string) error {
	m, err := b.c.MasterOf(key)
	if err != nil {
		return err
	}
	_, err = b.c.StallReplicasOf(m)
	return err
}
func (b clusterBed) resume() error { return b.c.ResumeReplicas() }
func (b clusterBed) kill(key string) (*redisserver.Server, error) {
	return b.c.KillMasterOf(key)
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
func (b clusterBed) client(t *testing.T) redis.UniversalClient {
	return servertest.ClusterClient(t, b.c)
}

// newFailoverClient returns a fencelock Client over a new go-redis client of
// bed, closed at cleanup.
func newFailoverClient(t *testing.T, bed replicated, opts ...redisbackend.Option) *fencelock.Client {
	t.Helper()
	return clientOn(t, bed.client(t), opts...)
}

// clientOn returns a fencelock Client over rdb, closed at cleanup.
func clientOn(t *testing.T, rdb redis.UniversalClient, opts ...redisbackend.Option) *fencelock.Client {
	t.Helper()
	c := fencelock.New(redisbackend.New(rdb, opts...))
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("closing fencelock client: %v", err)
		}
	})
	return c
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

// laggedFailover runs one lagged failover under a held lock: holder holds
// key (acquired with the holder's options, renewed automatically every
// renew), the replicas stop (before the acquire if stallBeforeAcquire), the
// holder renews up to 3 times in 1.5 s (those renewals are only on the
// master), the master is killed, and a contender on another
// Client waits for the key. It returns the holder's lock and the
// contender's result; the caller judges them. The failover is complete and
// the old master a replica again when it returns.
func laggedFailover(ctx context.Context, t *testing.T, bed replicated, holder, contender *fencelock.Client, key string, ttl, renew time.Duration, stallBeforeAcquire bool) (lk *fencelock.Lock, r acquired, heldAtTakeover bool) {
	t.Helper()
	redisKey := lockKey(fencelock.DefaultNamespace, key)
	var err error
	if stallBeforeAcquire {
		if err := bed.stall(redisKey); err != nil {
			t.Fatal(err)
		}
	}
	lk, err = holder.Acquire(ctx, key, ttl, fencelock.WithAutoRenew(renew), fencelock.WithWait(failoverBound))
	if err != nil {
		t.Fatalf("holder's Acquire: %v", err)
	}
	if !stallBeforeAcquire {
		if err := bed.stall(redisKey); err != nil {
			t.Fatal(err)
		}
	}
	// A few renewals that reach the master but no replica.
	time.Sleep(min(3*renew, 1500*time.Millisecond))
	old, err := bed.kill(redisKey)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// The contender's lease outlasts the rejoin below, so that the caller
	// can still release it. What the holder believes is read the moment
	// the contender has the lock.
	result := make(chan acquired, 1)
	heldAt := make(chan bool, 1)
	go func() {
		r := <-contend(ctx, contender, key, 2*failoverBound, failoverBound)
		heldAt <- r.err == nil && lk.Held()
		result <- r
	}()
	if err := bed.resume(); err != nil {
		t.Fatal(err)
	}
	promoted, err := bed.waitFailover(old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s promoted %v after kill -9 of %s", promoted.Addr(), time.Since(killed).Round(time.Millisecond), old.Addr())
	// With replica acknowledgement, a Cluster shard has no replica to
	// acknowledge until the old master is back: rejoin while the contender
	// waits.
	if err := bed.rejoin(old); err != nil {
		t.Fatal(err)
	}
	r = <-result
	heldAtTakeover = <-heldAt
	if r.err == nil {
		t.Logf("contender had the lock %v after the kill", r.at.Sub(killed).Round(time.Millisecond))
	}
	return lk, r, heldAtTakeover
}

// With replica acknowledgement, a lagged failover never takes a lock from
// a holder that still believes it holds it: the renewals the replicas
// missed were not counted, so the holder's local deadline passes before the
// lease the promoted replica remembers ends. Fences keep rising. An acquire
// while the replicas lag is refused with ErrNotReplicated.
//
// FENCELOCK_FAILOVERS=n runs n failovers on each test bed instead of 3 and 2.
func TestLaggedFailoverWithReplicaAck(t *testing.T) {
	t.Parallel()
	// Acknowledgement from every replica: Sentinel may promote the replica
	// that did not acknowledge (WAIT is not consensus; docs/backends.md says so),
	// and a test must not depend on which one it picks.
	for _, topo := range []struct {
		name     string
		rounds   int
		replicas int
		start    func(t *testing.T) replicated
	}{
		{"sentinel", 3, 2, func(t *testing.T) replicated { return sentinelBed{servertest.RedisSentinelGroup(t)} }},
		{"cluster", 2, 1, func(t *testing.T) replicated { return clusterBed{servertest.RedisClusterWithReplicas(t, 3)} }},
	} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			rounds := topo.rounds
			if n, err := strconv.Atoi(os.Getenv("FENCELOCK_FAILOVERS")); err == nil && n > 0 {
				rounds = n // e.g. FENCELOCK_FAILOVERS=20 for the figures in docs/backends.md
			}
			bed := topo.start(t)
			ack := redisbackend.WithReplicaAck(topo.replicas, replicaAckTimeout)
			holder := newFailoverClient(t, bed, ack)
			contender := newFailoverClient(t, bed, ack)
			ctx := topoCtx(t, 5*time.Minute)
			const key, ttl = "job", 3 * time.Second
			var lastFence int64
			for round := range rounds {
				lk, r, believed := laggedFailover(ctx, t, bed, holder, contender, key, ttl, ttl/6, false)
				if r.err != nil {
					t.Fatalf("round %d: contender's Acquire: %v", round, r.err)
				}
				if believed {
					t.Errorf("round %d: the contender holds the lock while the holder still believes it holds it (lost silently)", round)
				}
				if !errors.Is(lk.Err(), fencelock.ErrLost) {
					t.Errorf("round %d: holder's Err() = %v, want ErrLost", round, lk.Err())
				}
				if r.lk.Fence() <= lk.Fence() || lk.Fence() <= lastFence {
					t.Errorf("round %d: fences %d (previous), %d (holder), %d (contender): not increasing", round, lastFence, lk.Fence(), r.lk.Fence())
				}
				lastFence = r.lk.Fence()
				if err := r.lk.Release(ctx); err != nil {
					t.Fatalf("round %d: contender's Release: %v", round, err)
				}
			}

			// While the replicas lag, an acquire cannot be acknowledged:
			// refused, and undone on the master.
			probe := lockKey(fencelock.DefaultNamespace, key)
			if err := bed.stall(probe); err != nil {
				t.Fatal(err)
			}
			_, err := contender.TryAcquire(ctx, key, ttl)
			if err := bed.resume(); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(err, fencelock.ErrNotReplicated) || !errors.Is(err, fencelock.ErrNotAcquired) {
				t.Fatalf("TryAcquire while the replicas lag: %v, want ErrNotReplicated and ErrNotAcquired", err)
			}
			lk, err := holder.Acquire(ctx, key, ttl, fencelock.WithWait(failoverBound))
			if err != nil {
				t.Fatalf("Acquire once the replicas are back (the refused acquire must not linger): %v", err)
			}
			if lk.Fence() <= lastFence {
				t.Errorf("fence %d after the failovers, not above %d", lk.Fence(), lastFence)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Without replica acknowledgement, the same lagged failover loses the lock:
// the promoted replica never saw the acquire, and a contender takes the key
// while the holder still believes it holds it. That is what WithReplicaAck
// is for; the holder is told at its next renewal, and the fence still rises
// (the server-clock floor), so a fenced store refuses the holder's writes.
func TestLaggedFailoverWithoutReplicaAckLosesLock(t *testing.T) {
	t.Parallel()
	bed := sentinelBed{servertest.RedisSentinelGroup(t)}
	holder := newFailoverClient(t, bed)
	contender := newFailoverClient(t, bed)
	ctx := topoCtx(t, 5*time.Minute)
	// A lease longer than any failover here, and a renewal that usually
	// comes after the contender took the key, so the holder still believes.
	const key, ttl, renew = "job", 60 * time.Second, 10 * time.Second
	lk, r, believed := laggedFailover(ctx, t, bed, holder, contender, key, ttl, renew, true)
	if r.err != nil {
		t.Fatalf("contender's Acquire: %v", r.err)
	}
	if !believed {
		// On a busy machine the failover can outlast the renew interval:
		// then the holder's renewal reached the new master first and found
		// the lock gone. That shows the loss as well, only told in time.
		if !errors.Is(lk.Err(), fencelock.ErrLost) || time.Until(lk.Deadline()) < ttl/2 {
			t.Fatalf("the holder no longer believed it held the lock when the contender took it (%v), but not because its hold was gone: the lagged failover did not show the loss", lk.Err())
		}
		t.Logf("the holder's renewal found the lock gone before the contender took it: %v", lk.Err())
	}
	if r.lk.Fence() <= lk.Fence() {
		t.Errorf("contender's fence %d not above the lost holder's %d", r.lk.Fence(), lk.Fence())
	}
	// The holder's next renewal finds its hold gone: told about a renew
	// interval after the contender took the key.
	select {
	case <-lk.Done():
	case <-time.After(failoverBound):
		t.Fatalf("holder not told of the loss %v after the contender took the key", failoverBound)
	}
	if !errors.Is(lk.Err(), fencelock.ErrLost) {
		t.Errorf("holder's Err() = %v, want ErrLost", lk.Err())
	}
	if err := r.lk.Release(ctx); err != nil {
		t.Fatal(err)
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
		start func(t *testing.T) replicated
	}{
		{"sentinel", func(t *testing.T) replicated { return sentinelBed{servertest.RedisSentinelGroup(t)} }},
		{"cluster", func(t *testing.T) replicated { return clusterBed{servertest.RedisClusterWithReplicas(t, 3)} }},
	} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			bed := topo.start(t)
			ack := redisbackend.WithReplicaAck(1, replicaAckTimeout)
			rdb := bed.client(t)
			scripts := countScripts(rdb)
			holder := clientOn(t, rdb, ack)
			contender := newFailoverClient(t, bed)
			ctx := topoCtx(t, 5*time.Minute)
			const key, ttl = "job", 60 * time.Second
			redisKey := lockKey(fencelock.DefaultNamespace, key)
			// Renewed often, so that renewals are in flight in the outage.
			lk, err := holder.Acquire(ctx, key, ttl, fencelock.WithAutoRenew(200*time.Millisecond), fencelock.WithWait(failoverBound))
			if err != nil {
				t.Fatal(err)
			}
			renewedTimes(t, ctx, lk, 3) // acknowledged by a replica
			old, err := bed.kill(redisKey)
			if err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			scripts.waitPast(t, scripts.count()) // a renewal sent after the kill: now stuck
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
			info, err := redisbackend.New(bed.client(t)).Inspect(ctx, fencelock.DefaultNamespace, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Holds) != 1 || info.Holds[0].Token != r.lk.Token() {
				t.Errorf("holds on the new master: %+v, want only the contender's %s", info.Holds, r.lk.Token())
			}
			// Released before the old master rejoins: on a busy machine the
			// rejoin can outlast the contender's 10 s lease.
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

// On a Cluster, a key is usable again soon after the master that served it
// is killed, with go-redis's default options: the backend asks go-redis to
// reload the slot map when a node fails instead of waiting for the
// once-a-minute refresh. The first acquire should come within 5 s of the
// kill; a busy machine can stretch the failover
// itself beyond that, so the test allows the cluster's own promotion time
// plus 3 s when that is longer.
func TestClusterAcquireSoonAfterFailover(t *testing.T) {
	t.Parallel()
	cl := servertest.RedisClusterWithReplicas(t, 3)
	bed := clusterBed{cl}
	c := newFailoverClient(t, bed)
	ctx := topoCtx(t, 5*time.Minute)
	const key, ttl = "job", 10 * time.Second
	lk, err := c.TryAcquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	old, err := bed.kill(lockKey(fencelock.DefaultNamespace, key))
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
	every := time.NewTicker(20 * time.Millisecond) // an attempt every 20ms until one gets the lock
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
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := bed.rejoin(old); err != nil {
		t.Fatal(err)
	}
}

// renewedTimes waits until lk's deadline has moved n times: n automatic
// renewals were granted.
func renewedTimes(t *testing.T, ctx context.Context, lk *fencelock.Lock, n int) {
	t.Helper()
	deadline := lk.Deadline()
	for i := range n {
		pollUntil(t, failoverBound, fmt.Sprintf("renewal %d of %d", i+1, n), func() bool {
			if err := lk.Err(); err != nil {
				t.Fatalf("lost while waiting for renewals: %v", err)
			}
			return lk.Deadline().After(deadline)
		})
		deadline = lk.Deadline()
	}
}

// scriptCounter is a go-redis hook that counts the scripts (EVAL, EVALSHA)
// a client sends: once a lock is held, those of its Client are renewals,
// so that a test waits for one instead of sleeping.
type scriptCounter struct {
	mu      sync.Mutex
	sent    int
	changed chan struct{} // closed at each script sent, then replaced
}

// countScripts adds a scriptCounter to rdb, which must not have sent
// anything yet: on Cluster, the hook goes on each node's client as it is
// made, which is where the backend's pipelines to a master run.
func countScripts(rdb redis.UniversalClient) *scriptCounter {
	c := &scriptCounter{changed: make(chan struct{})}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(c) })
	} else {
		rdb.AddHook(c)
	}
	return c
}

func (c *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.note([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (c *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.note(cmds)
		return next(ctx, cmds)
	}
}

// note counts the scripts among cmds, about to be sent.
func (c *scriptCounter) note(cmds []redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			c.sent++
			close(c.changed)
			c.changed = make(chan struct{})
		}
	}
}

// count returns the number of scripts sent so far.
func (c *scriptCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent
}

// waitPast waits until more than n scripts were sent, up to failoverBound.
func (c *scriptCounter) waitPast(t *testing.T, n int) {
	t.Helper()
	timeout := time.NewTimer(failoverBound)
	defer timeout.Stop()
	for {
		c.mu.Lock()
		sent, changed := c.sent, c.changed
		c.mu.Unlock()
		if sent > n {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("no script sent within %v after the %d before", failoverBound, n)
		}
	}
}
