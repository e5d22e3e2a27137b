package etcdbackend_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/etcdbackend/testing/etcdserver"
)

// guard is the protected resource of the fault tests: it counts who is
// inside each key's critical section and refuses a fence that is not above
// the last one it accepted, as a fenced store would.
type guard struct {
	mu       sync.Mutex
	inside   map[string]int
	last     map[string]int64
	entries  int
	overlaps []string
}

func newGuard() *guard { return &guard{inside: map[string]int{}, last: map[string]int64{}} }

func (g *guard) enter(key string, fence int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entries++
	if g.inside[key] > 0 {
		g.overlaps = append(g.overlaps, fmt.Sprintf("%s: fence %d entered while %d holder(s) inside", key, fence, g.inside[key]))
	}
	if fence <= g.last[key] {
		g.overlaps = append(g.overlaps, fmt.Sprintf("%s: fence %d after %d", key, fence, g.last[key]))
	}
	g.inside[key]++
	g.last[key] = max(g.last[key], fence)
}

func (g *guard) leave(key string) {
	g.mu.Lock()
	g.inside[key]--
	g.mu.Unlock()
}

func (g *guard) check(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, o := range g.overlaps {
		t.Error(o)
	}
	if g.entries == 0 {
		t.Error("no critical section was entered")
	}
}

// untilLeader waits for the cluster to have a leader and returns it.
func untilLeader(ctx context.Context, t *testing.T, c *etcdserver.Cluster) int {
	t.Helper()
	var leader int
	var err error
	until(ctx, t, "a leader", func() bool {
		leader, err = c.Leader(ctx)
		return err == nil
	})
	return leader
}

// until polls cond until it holds, failing the test when ctx ends first
// (its deadline only bounds a hang: make it generous).
func until(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// renewedSince waits until each lock's deadline is past the one given for
// it: a renewal sent since was granted.
func renewedSince(ctx context.Context, t *testing.T, locks []*fencelock.Lock, deadlines []time.Time) {
	t.Helper()
	for i, lk := range locks {
		until(ctx, t, fmt.Sprintf("a renewal of %s", lk.Key()), func() bool {
			return lk.Err() != nil || lk.Deadline().After(deadlines[i])
		})
	}
}

// deadlinesOf returns the locks' deadlines.
func deadlinesOf(locks []*fencelock.Lock) []time.Time {
	var out []time.Time
	for _, lk := range locks {
		out = append(out, lk.Deadline())
	}
	return out
}

// entered returns how many critical sections were entered.
func (g *guard) entered() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.entries
}

// Kill -9 the leader while locks are held and workers take turns on two
// keys: the held locks survive (renewed through the new leader), no two
// workers are ever inside at once, fences only rise, and the workers go on
// after the election and after the old leader rejoins.
func TestLeaderKilledWhileLocksHeld(t *testing.T) {
	c := etcdserver.New(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	newLocks := func() *fencelock.Client {
		l := fencelock.New(etcdbackend.New(newClient(t, c.Endpoints()...)))
		t.Cleanup(func() { l.Close() })
		return l
	}

	// Long-held locks: a 6 s lease renewed every 2 s.
	holder := newLocks()
	var held []*fencelock.Lock
	for i := range 3 {
		lk, err := holder.TryAcquire(ctx, fmt.Sprint("held-", i), 6*time.Second, fencelock.WithAutoRenew(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lk)
	}

	g := newGuard()
	stop := make(chan struct{})
	var afterKill atomic.Int64
	var killed atomic.Bool
	var wg sync.WaitGroup
	for w := range 4 {
		locks := newLocks()
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprint("turn-", (w+i)%2)
				err := locks.Do(ctx, key, 6*time.Second, func(ctx context.Context, lk *fencelock.Lock) error {
					g.enter(key, lk.Fence())
					defer g.leave(key)
					time.Sleep(5 * time.Millisecond)
					if killed.Load() {
						afterKill.Add(1)
					}
					return nil
				}, fencelock.WithWait(20*time.Second))
				if err != nil && !errors.Is(err, fencelock.ErrUnavailable) && !errors.Is(err, fencelock.ErrNotAcquired) {
					t.Errorf("worker %d: %v", w, err)
					return
				}
			}
		})
	}

	until(ctx, t, "the workers to take turns", func() bool { return g.entered() >= 20 })
	leader := untilLeader(ctx, t, c)
	killedAt := time.Now()
	atKill := deadlinesOf(held)
	c.Kill(leader)
	killed.Store(true)
	newLeader := untilLeader(ctx, t, c)
	t.Logf("killed leader m%d; m%d leads %v later", leader, newLeader, time.Since(killedAt).Round(time.Millisecond))
	// The held locks are renewed past the lease they had at the kill, twice:
	// the second renewal was sent a renewal interval after the first had
	// its answer, so after the kill, and granted through the new leader.
	renewedSince(ctx, t, held, atKill)
	renewedSince(ctx, t, held, deadlinesOf(held))
	until(ctx, t, "critical sections after the kill", func() bool { return afterKill.Load() >= 20 })
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	rejoined := g.entered()
	until(ctx, t, "critical sections after the old leader rejoined", func() bool { return g.entered() >= rejoined+20 })
	close(stop)
	wg.Wait()

	g.check(t)
	if afterKill.Load() == 0 {
		t.Error("no critical section after the leader was killed")
	}
	t.Logf("%d critical sections, %d after the kill", g.entries, afterKill.Load())
	for _, lk := range held {
		if err := lk.Err(); err != nil {
			t.Errorf("held lock %s lost across the failover: %v", lk.Key(), err)
			continue
		}
		if ttl, err := lk.TTL(ctx); err != nil || ttl <= 0 {
			t.Errorf("held lock %s: TTL %v %v", lk.Key(), ttl, err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Errorf("release of %s: %v", lk.Key(), err)
		}
	}
}

// A holder whose only member is cut off (SIGSTOP: it answers no one) loses
// its lock at its local deadline and is told (Done, ErrLost) before a
// client of the other members gets the lock, with a larger fence.
func TestPartitionedHolderLosesLock(t *testing.T) {
	// The member cut off is the leader (the majority elects another, which
	// extends the leases it finds), or a follower (the leader goes on).
	for _, leader := range []bool{true, false} {
		name := map[bool]string{true: "leader", false: "follower"}[leader]
		t.Run(name, func(t *testing.T) { partitionedHolder(t, leader) })
	}
}

func partitionedHolder(t *testing.T, cutLeader bool) {
	c := etcdserver.New(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The minority side: one member, cut off from everyone. Its clients
	// talk to it alone.
	cut := untilLeader(ctx, t, c)
	if !cutLeader {
		cut = (cut + 1) % len(c.Members())
	}
	var majority []string
	for i, m := range c.Members() {
		if i != cut {
			majority = append(majority, m.ClientURL)
		}
	}
	// A safety margin of a quarter of the lease rather than a tenth: the
	// loss signal then comes 750 ms before the server's lease can end, not
	// 300 ms, which a busy 2-core machine running -race can eat up in
	// scheduling delay alone (measured with a follower cut: the lock was
	// taken 0.5 s after the holder was told, with the default margin).
	minorityLocks := fencelock.New(etcdbackend.New(newClient(t, c.Members()[cut].ClientURL)), fencelock.WithSafetyMargin(0.25))
	majorityLocks := fencelock.New(etcdbackend.New(newClient(t, majority...)))
	defer majorityLocks.Close()
	defer minorityLocks.Close()
	defer c.Resume(cut) // before the clients close, so that they can

	const ttl = 3 * time.Second
	lk, err := minorityLocks.TryAcquire(ctx, "k", ttl, fencelock.WithAutoRenew(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lost := make(chan time.Time, 1)
	go func() {
		<-lk.Done()
		lost <- time.Now()
	}()

	c.Pause(cut)
	paused := time.Now()
	next, err := majorityLocks.Acquire(ctx, "k", ttl, fencelock.WithWait(time.Minute))
	if err != nil {
		t.Fatalf("the majority's client did not get the lock: %v", err)
	}
	acquired := time.Now()
	defer next.Release(ctx)

	var lostAt time.Time
	select {
	case lostAt = <-lost:
	default:
		t.Fatalf("the cut-off holder was not told of its loss before the lock was taken %v after the cut (its Err: %v)",
			acquired.Sub(paused).Round(time.Millisecond), lk.Err())
	}
	if !errors.Is(lk.Err(), fencelock.ErrLost) {
		t.Errorf("the cut-off holder's Err: %v, want ErrLost", lk.Err())
	}
	if next.Fence() <= lk.Fence() {
		t.Errorf("the new holder's fence %d, want above the cut-off holder's %d", next.Fence(), lk.Fence())
	}
	t.Logf("cut m%d; the holder was told %v after the cut, the lock taken on the majority %v after it (%v later)",
		cut, lostAt.Sub(paused).Round(time.Millisecond), acquired.Sub(paused).Round(time.Millisecond),
		acquired.Sub(lostAt).Round(time.Millisecond))
}

// Stop every member (kill -9) while locks are held, then start them again:
// the locks are still held afterwards (renewals resume; etcd restores the
// leases), others are still refused, and the next fence is larger than
// every fence before the restart.
func TestWholeClusterRestart(t *testing.T) {
	c := etcdserver.New(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	locks := fencelock.New(etcdbackend.New(newClient(t, c.Endpoints()...)))
	others := fencelock.New(etcdbackend.New(newClient(t, c.Endpoints()...)))
	defer others.Close()
	defer locks.Close()

	// A lease long enough to ride out the restart on a busy machine.
	const ttl = 30 * time.Second
	var held []*fencelock.Lock
	var top int64
	for i := range 3 {
		lk, err := locks.TryAcquire(ctx, fmt.Sprint("k", i), ttl, fencelock.WithAutoRenew(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lk)
		top = max(top, lk.Fence())
	}

	down := time.Now()
	for i := range c.Members() {
		c.Kill(i)
	}
	for i := range c.Members() {
		if err := c.Restart(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("the cluster was down and back in %v", time.Since(down).Round(time.Millisecond))
	// Two renewals at least once it is back: the first may have been sent
	// while it was down.
	renewedSince(ctx, t, held, deadlinesOf(held))
	renewedSince(ctx, t, held, deadlinesOf(held))

	for _, lk := range held {
		if err := lk.Err(); err != nil {
			t.Fatalf("lock %s lost across the restart: %v", lk.Key(), err)
		}
		if ttl, err := lk.TTL(ctx); err != nil || ttl <= 0 {
			t.Errorf("lock %s: TTL %v %v after the restart", lk.Key(), ttl, err)
		}
		if _, err := others.TryAcquire(ctx, lk.Key(), time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Errorf("another client's TryAcquire of %s after the restart: %v, want ErrNotAcquired", lk.Key(), err)
		}
	}
	fresh, err := others.TryAcquire(ctx, "fresh", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Fence() <= top {
		t.Errorf("fence after the restart %d, want above %d", fresh.Fence(), top)
	}
	fresh.Release(ctx)
	for _, lk := range held {
		if err := lk.Release(ctx); err != nil {
			t.Errorf("release of %s: %v", lk.Key(), err)
		}
	}
}
