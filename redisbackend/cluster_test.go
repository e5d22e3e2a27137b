package redisbackend_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// Tests of the backend on a real Redis Cluster (3 masters) and behind a real
// Sentinel, through go-redis's ClusterClient and FailoverClient.

// topoTimeout bounds each go-redis request of these tests.
const topoTimeout = 2 * time.Second

// topoCtx returns a context that ends after d, cancelled at cleanup.
func topoCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newClusterRDB returns a ClusterClient for cl, closed at cleanup. newNode,
// if not nil, is called for each node client go-redis makes (to add hooks).
func newClusterRDB(t *testing.T, cl *redisserver.Cluster, newNode func(*redis.Client)) *redis.ClusterClient {
	t.Helper()
	opt := &redis.ClusterOptions{
		Addrs:        cl.Addrs(),
		DialTimeout:  topoTimeout,
		ReadTimeout:  topoTimeout,
		WriteTimeout: topoTimeout,
	}
	if newNode != nil {
		opt.NewClient = func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			newNode(c)
			return c
		}
	}
	rdb := redis.NewClusterClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// newFailoverRDB returns a go-redis client that finds the master through the
// sentinel, closed at cleanup.
func newFailoverRDB(t *testing.T, sentinel *redisserver.Server) *redis.Client {
	t.Helper()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    servertest.SentinelMaster,
		SentinelAddrs: []string{sentinel.Addr()},
		DialTimeout:   topoTimeout,
		ReadTimeout:   topoTimeout,
		WriteTimeout:  topoTimeout,
	})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// newTopoClient returns a fencelock Client on rdb, closed at cleanup (before
// rdb, which was registered earlier).
func newTopoClient(t *testing.T, rdb redis.UniversalClient, opts ...fencelock.Option) *fencelock.Client {
	t.Helper()
	c := fencelock.New(redisbackend.New(rdb), opts...)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("closing fencelock client: %v", err)
		}
	})
	return c
}

// lockKey and fenceKey are the Redis keys of a lock (see keys.go).
func lockKey(namespace, key string) string  { return topoKey(namespace, key) + ":lock" }
func fenceKey(namespace, key string) string { return topoKey(namespace, key) + ":fence" }
func channelOf(namespace, key string) string {
	return topoKey(namespace, key) + ":released"
}

func topoKey(namespace, key string) string {
	if namespace == "" {
		return "{" + key + "}"
	}
	return namespace + ":{" + key + "}"
}

// nodeOf returns the address of the master that serves redisKey.
func nodeOf(t *testing.T, rdb *redis.ClusterClient, redisKey string) string {
	t.Helper()
	node, err := rdb.MasterForKey(context.Background(), redisKey)
	if err != nil {
		t.Fatalf("MasterForKey(%q): %v", redisKey, err)
	}
	return node.Options().Addr
}

// keysPerNode returns n lock keys named prefix-0, prefix-1, ... with their
// nodes, and fails unless they are spread over every node of cl.
func keysPerNode(t *testing.T, cl *redisserver.Cluster, rdb *redis.ClusterClient, namespace, prefix string, n int) (keys []string, node map[string]string) {
	t.Helper()
	node = map[string]string{}
	count := map[string]int{}
	for i := range n {
		key := fmt.Sprintf("%s-%d", prefix, i)
		keys = append(keys, key)
		node[key] = nodeOf(t, rdb, lockKey(namespace, key))
		count[node[key]]++
	}
	for _, addr := range cl.Addrs() {
		if count[addr] == 0 {
			t.Fatalf("none of the %d keys lands on node %s (%v): pick other names", n, addr, count)
		}
	}
	return keys, node
}

// directClients returns a plain client for each node of cl, closed at cleanup.
func directClients(t *testing.T, cl *redisserver.Cluster) map[string]*redis.Client {
	t.Helper()
	m := map[string]*redis.Client{}
	for _, addr := range cl.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: topoTimeout, WriteTimeout: topoTimeout})
		t.Cleanup(func() { c.Close() })
		m[addr] = c
	}
	return m
}

// checkNoRedirect fails if err carries a cluster error: a script that
// touched keys of two slots, or a request sent to the wrong node.
func checkNoRedirect(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, bad := range []string{"CROSSSLOT", "MOVED", "ASK", "CLUSTERDOWN"} {
		if strings.Contains(err.Error(), bad) {
			t.Fatalf("cluster error: %v", err)
		}
	}
}

// TestClusterLockCycle runs TryAcquire, a refused second TryAcquire,
// Refresh, Release and a re-acquire on 20 keys spread over the 3 masters,
// and checks each lock's keys on the node that serves its slot.
func TestClusterLockCycle(t *testing.T) {
	t.Parallel()
	cl := servertest.RedisCluster(t, 3)
	direct := directClients(t, cl)
	for _, ns := range []string{fencelock.DefaultNamespace, ""} {
		t.Run(fmt.Sprintf("namespace=%q", ns), func(t *testing.T) {
			rdb := newClusterRDB(t, cl, nil)
			c := newTopoClient(t, rdb, fencelock.WithNamespace(ns))
			ctx := topoCtx(t, 30*time.Second)
			keys, nodeOfKey := keysPerNode(t, cl, rdb, ns, "order", 20)
			for _, key := range keys {
				node := direct[nodeOfKey[key]]
				lk, err := c.TryAcquire(ctx, key, 10*time.Second)
				checkNoRedirect(t, err)
				if err != nil {
					t.Fatalf("%s: TryAcquire: %v", key, err)
				}
				if lk.Fence() <= 0 || !lk.Held() {
					t.Fatalf("%s: fence %d, held %v", key, lk.Fence(), lk.Held())
				}
				// Both keys of the lock live on its slot's node (hash tag).
				if n, err := node.Exists(ctx, lockKey(ns, key), fenceKey(ns, key)).Result(); err != nil || n != 2 {
					t.Fatalf("%s: EXISTS lock fence on %s = %d, %v; want 2", key, nodeOfKey[key], n, err)
				}

				_, err = c.TryAcquire(ctx, key, 10*time.Second)
				checkNoRedirect(t, err)
				var nae *fencelock.NotAcquiredError
				if !errors.Is(err, fencelock.ErrNotAcquired) || !errors.As(err, &nae) {
					t.Fatalf("%s: second TryAcquire: %v, want ErrNotAcquired", key, err)
				}
				if nae.HolderTTL <= 0 || nae.HolderTTL > 10*time.Second {
					t.Errorf("%s: HolderTTL %v, want in (0, 10s]", key, nae.HolderTTL)
				}

				if err := lk.Refresh(ctx, 30*time.Second); err != nil {
					checkNoRedirect(t, err)
					t.Fatalf("%s: Refresh: %v", key, err)
				}
				if pttl, err := node.PTTL(ctx, lockKey(ns, key)).Result(); err != nil || pttl <= 10*time.Second {
					t.Fatalf("%s: PTTL after Refresh(30s) = %v, %v", key, pttl, err)
				}
				if ttl, err := lk.TTL(ctx); err != nil || ttl <= 10*time.Second {
					t.Fatalf("%s: TTL after Refresh(30s) = %v, %v", key, ttl, err)
				}

				if err := lk.Release(ctx); err != nil {
					checkNoRedirect(t, err)
					t.Fatalf("%s: Release: %v", key, err)
				}
				if lk.Held() {
					t.Errorf("%s: Held after Release", key)
				}
				if n, err := node.Exists(ctx, lockKey(ns, key)).Result(); err != nil || n != 0 {
					t.Fatalf("%s: lock key still there after Release (%d, %v)", key, n, err)
				}

				again, err := c.TryAcquire(ctx, key, 10*time.Second)
				if err != nil {
					checkNoRedirect(t, err)
					t.Fatalf("%s: re-acquire: %v", key, err)
				}
				if again.Fence() <= lk.Fence() {
					t.Errorf("%s: fence went from %d to %d", key, lk.Fence(), again.Fence())
				}
				if err := again.Release(ctx); err != nil {
					t.Fatalf("%s: Release: %v", key, err)
				}
			}
		})
	}
}

// renewalRecorder records the renewal pipelines of a ClusterClient: for each
// pipeline the cluster client ran, how many commands it had and how many
// nodes they went to; and how many pipelines each node ran.
type renewalRecorder struct {
	nodeOf map[string]string // lock key -> node address; read-only

	mu        sync.Mutex
	on        bool
	batches   []int // commands per cluster pipeline
	spans     []int // nodes per cluster pipeline
	perNode   map[string]int
	unmatched int // pipeline commands on keys not in nodeOf
}

func (r *renewalRecorder) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (r *renewalRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook is the cluster-level hook: it sees a whole batch.
func (r *renewalRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		nodes := map[string]bool{}
		unmatched := 0
		for _, cmd := range cmds {
			// EVAL/EVALSHA script numkeys key ...
			args := cmd.Args()
			if len(args) < 4 {
				unmatched++
				continue
			}
			key, _ := args[3].(string)
			if node, ok := r.nodeOf[key]; ok {
				nodes[node] = true
			} else {
				unmatched++
			}
		}
		r.mu.Lock()
		if r.on {
			r.batches = append(r.batches, len(cmds))
			r.spans = append(r.spans, len(nodes))
			r.unmatched += unmatched
		}
		r.mu.Unlock()
		return next(ctx, cmds)
	}
}

// nodeHook counts the pipelines one node client runs.
type nodeHook struct {
	r    *renewalRecorder
	addr string
}

func (h nodeHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.r.mu.Lock()
		if h.r.on {
			h.r.perNode[h.addr]++
		}
		h.r.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (r *renewalRecorder) record(on bool) {
	r.mu.Lock()
	r.on = on
	r.mu.Unlock()
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestClusterAutoRenew keeps 30 locks spread over the 3 masters past their
// 3 s lease, renewed every 500 ms: the renewal batches are cluster
// pipelines that go to every node, and no lock is lost.
func TestClusterAutoRenew(t *testing.T) {
	t.Parallel()
	const (
		n        = 30
		ttl      = 3 * time.Second
		interval = 500 * time.Millisecond
		rounds   = 4 // renewals of each lock to wait for
	)
	cl := servertest.RedisCluster(t, 3)
	direct := directClients(t, cl)

	// Find the keys' nodes with a separate client: the recorder's node map
	// must be complete before its client runs anything.
	probe := newClusterRDB(t, cl, nil)
	keys, keyNode := keysPerNode(t, cl, probe, fencelock.DefaultNamespace, "renew", n)
	rec := &renewalRecorder{nodeOf: map[string]string{}, perNode: map[string]int{}}
	for _, key := range keys {
		rec.nodeOf[lockKey(fencelock.DefaultNamespace, key)] = keyNode[key]
	}
	rdb := newClusterRDB(t, cl, func(c *redis.Client) {
		c.AddHook(nodeHook{r: rec, addr: c.Options().Addr})
	})
	rdb.AddHook(rec)
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c := newTopoClient(t, rdb, fencelock.WithLogger(logger))
	ctx := topoCtx(t, 2*time.Minute)

	// Take the locks at about the same time, so that they come due together.
	locks := make([]*fencelock.Lock, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, key := range keys {
		wg.Go(func() {
			lk, err := c.TryAcquire(ctx, key, ttl, fencelock.WithAutoRenew(interval))
			if err != nil {
				errs <- fmt.Errorf("%s: %w", key, err)
				return
			}
			locks[i] = lk
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		checkNoRedirect(t, err)
		t.Fatal(err)
	}
	// The leases granted at acquisition have ended by then: a lock still
	// held afterwards was kept by its renewals.
	firstLeasesEnd := time.Now().Add(ttl)
	rec.record(true)
	pollUntil(t, time.Minute, "renewals past the first leases", func() bool {
		rec.mu.Lock()
		renewed := 0
		for _, b := range rec.batches {
			renewed += b
		}
		rec.mu.Unlock()
		return renewed >= n*rounds && time.Now().After(firstLeasesEnd)
	})
	rec.record(false)

	for i, lk := range locks {
		if !lk.Held() || lk.Err() != nil {
			t.Errorf("%s: held %v, err %v after its first lease", keys[i], lk.Held(), lk.Err())
		}
		pttl, err := direct[keyNode[keys[i]]].PTTL(ctx, lockKey(fencelock.DefaultNamespace, keys[i])).Result()
		if err != nil || pttl <= 0 {
			t.Errorf("%s: PTTL on its node = %v, %v", keys[i], pttl, err)
		}
	}
	// A renewal that timed out on a loaded machine is retried (and logged);
	// any other warning (a lost lock, a cluster error) is a failure.
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		switch {
		case line == "":
		case strings.Contains(line, "renewal failed") &&
			(strings.Contains(line, "deadline exceeded") || strings.Contains(line, "timeout")):
			t.Logf("tolerated: %s", line)
		default:
			t.Errorf("warning while renewing: %s", line)
		}
	}

	rec.mu.Lock()
	batches, spans, perNode, unmatched := rec.batches, rec.spans, rec.perNode, rec.unmatched
	rec.mu.Unlock()
	renewed, widest, largest := 0, 0, 0
	for i, b := range batches {
		renewed += b
		widest = max(widest, spans[i])
		largest = max(largest, b)
	}
	t.Logf("%d renewal batches (%d renewals, largest %d, widest %d nodes); node pipelines %v",
		len(batches), renewed, largest, widest, perNode)
	if len(batches) >= renewed {
		t.Errorf("%d batches for %d renewals: renewals are not batched", len(batches), renewed)
	}
	if widest != len(cl.Addrs()) {
		t.Errorf("no renewal batch spanned all %d nodes (widest: %d)", len(cl.Addrs()), widest)
	}
	if unmatched > 0 {
		t.Errorf("%d pipelined commands on unexpected keys", unmatched)
	}
	for _, addr := range cl.Addrs() {
		if perNode[addr] == 0 {
			t.Errorf("node %s ran no renewal pipeline", addr)
		}
	}

	for i, lk := range locks {
		if err := lk.Release(ctx); err != nil {
			t.Errorf("%s: Release: %v", keys[i], err)
		}
	}
}

// subscribers returns, for each node, how many clients are subscribed to
// channel there.
func subscribers(ctx context.Context, t *testing.T, direct map[string]*redis.Client, channel string) map[string]int64 {
	t.Helper()
	m := map[string]int64{}
	for addr, c := range direct {
		n, err := c.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			t.Fatalf("PUBSUB NUMSUB on %s: %v", addr, err)
		}
		if n[channel] > 0 {
			m[addr] = n[channel]
		}
	}
	return m
}

// waitSubscribed polls until some node has a subscriber on channel and
// returns that node.
func waitSubscribed(ctx context.Context, t *testing.T, direct map[string]*redis.Client, channel string) string {
	t.Helper()
	var node string
	pollUntil(t, 30*time.Second, "a subscriber to "+channel, func() bool {
		for addr := range subscribers(ctx, t, direct, channel) {
			node = addr
			return true
		}
		return false
	})
	return node
}

// acquired is the outcome of a waiting Acquire.
type acquired struct {
	lk  *fencelock.Lock
	err error
	at  time.Time
}

// waitFallback is the waiter's fallback timer in the wake-up tests: longer
// than they wait for a wake-up, so that only the release message can wake
// the waiter in time.
const (
	waitFallback = 2 * time.Minute
	wakeBound    = 30 * time.Second
)

// wakeLatency has waiter wait for key, held by holder with a long lease,
// releases the lock once the waiter is subscribed (on the node returned)
// and asleep, and returns how long after the release began the waiter had
// the lock. attempts counts the waiter's acquire attempts.
func wakeLatency(ctx context.Context, t *testing.T, holder, waiter *fencelock.Client, attempts *servertest.AcquireAttempts, direct map[string]*redis.Client, key string) (time.Duration, string) {
	t.Helper()
	lk, err := holder.TryAcquire(ctx, key, 5*time.Minute)
	if err != nil {
		checkNoRedirect(t, err)
		t.Fatalf("%s: TryAcquire: %v", key, err)
	}
	before := attempts.Load()
	done := make(chan acquired, 1)
	go func() {
		wl, err := waiter.Acquire(ctx, key, 30*time.Second,
			fencelock.WithRetry(fencelock.ConstantBackoff{Delay: waitFallback}),
			fencelock.WithWait(waitFallback))
		done <- acquired{wl, err, time.Now()}
	}()
	subNode := waitSubscribed(ctx, t, direct, channelOf(fencelock.DefaultNamespace, key))
	// The waiter tries once more after subscribing, then sleeps: after two
	// answered attempts only a wake-up makes it try again.
	pollUntil(t, 30*time.Second, key+": two acquire attempts by the waiter", func() bool {
		return attempts.Load() >= before+2
	})

	select {
	case r := <-done:
		t.Fatalf("%s: waiter returned while the lock was held: %v", key, r.err)
	default:
	}
	start := time.Now()
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("%s: Release: %v", key, err)
	}
	r := awaitWaiter(t, key, done, lk)
	if err := r.lk.Release(ctx); err != nil {
		t.Errorf("%s: waiter's Release: %v", key, err)
	}
	return r.at.Sub(start), subNode
}

// awaitWaiter waits up to wakeBound for the waiting Acquire of key (done)
// after holder released it, fails the test if it failed, and checks that
// its fence is above holder's.
func awaitWaiter(t *testing.T, key string, done <-chan acquired, holder *fencelock.Lock) acquired {
	t.Helper()
	var r acquired
	select {
	case r = <-done:
	case <-time.After(wakeBound):
		t.Fatalf("%s: waiter did not get the lock within %v of the release", key, wakeBound)
	}
	if r.err != nil {
		checkNoRedirect(t, r.err)
		t.Fatalf("%s: waiter: %v", key, r.err)
	}
	if r.lk.Fence() <= holder.Fence() {
		t.Errorf("%s: waiter's fence %d not above the holder's %d", key, r.lk.Fence(), holder.Fence())
	}
	return r
}

// TestClusterWaiterWokenByRelease checks that a waiter on a cluster key is
// woken by the release message, for keys on every node. The waiter's Backend
// has one pub/sub connection, to one node; a release on another node reaches
// it because Redis Cluster broadcasts PUBLISH to every node. (How fast a
// release wakes a waiter is a timing property: the root package's
// timing_test.go, on the memory backend.)
func TestClusterWaiterWokenByRelease(t *testing.T) {
	t.Parallel()
	cl := servertest.RedisCluster(t, 3)
	direct := directClients(t, cl)
	holderRDB := newClusterRDB(t, cl, nil)
	waiterRDB := newClusterRDB(t, cl, nil)
	attempts := &servertest.AcquireAttempts{}
	waiterRDB.AddHook(attempts)
	holder := newTopoClient(t, holderRDB)
	waiter := newTopoClient(t, waiterRDB)
	ctx := topoCtx(t, 5*time.Minute)

	// One key per node, each used twice.
	keys, keyNode := keysPerNode(t, cl, holderRDB, fencelock.DefaultNamespace, "wake", 20)
	var perNode []string
	seen := map[string]bool{}
	for _, key := range keys {
		if !seen[keyNode[key]] {
			seen[keyNode[key]] = true
			perNode = append(perNode, key)
		}
	}
	crossNode := 0
	for round := range 2 {
		for _, key := range perNode {
			latency, subNode := wakeLatency(ctx, t, holder, waiter, attempts, direct, key)
			t.Logf("round %d: %s (node %s, waiter subscribed on %s): waiter had the lock %v after the release began",
				round, key, keyNode[key], subNode, latency.Round(100*time.Microsecond))
			if subNode != keyNode[key] {
				crossNode++
			}
		}
	}
	if crossNode == 0 {
		t.Errorf("the waiter always subscribed on the key's own node: the cross-node PUBLISH broadcast was not exercised")
	}
}

// TestClusterFairGrant checks that on a cluster a release hands the lock to
// a fair waiter of another process (a grant) and that the grant reaches it
// on its own channel (NS:grants:ID), for keys on every node: the waiter
// holds the lock without an attempt of its own after the release. Its
// Backend's one pub/sub connection goes to one node; a grant published on
// another reaches it because Redis Cluster broadcasts PUBLISH.
func TestClusterFairGrant(t *testing.T) {
	t.Parallel()
	cl := servertest.RedisCluster(t, 3)
	holderRDB := newClusterRDB(t, cl, nil)
	waiterRDB := newClusterRDB(t, cl, nil)
	attempts := &servertest.AcquireAttempts{Keys: 5, MinArgs: 7} // fair acquires
	waiterRDB.AddHook(attempts)
	holder := newTopoClient(t, holderRDB)
	waiter := newTopoClient(t, waiterRDB)
	ctx := topoCtx(t, 5*time.Minute)
	// PUBLISH reaches every node: one node's subscription sees every grant.
	var anyNode *redis.Client
	for _, c := range directClients(t, cl) {
		anyNode = c
		break
	}
	grants := anyNode.PSubscribe(ctx, fencelock.DefaultNamespace+":grants:*")
	t.Cleanup(func() { grants.Close() })
	if _, err := grants.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	keys, keyNode := keysPerNode(t, cl, holderRDB, fencelock.DefaultNamespace, "fair", 20)
	seen := map[string]bool{}
	for _, key := range keys {
		if seen[keyNode[key]] {
			continue
		}
		seen[keyNode[key]] = true
		lk, err := holder.Acquire(ctx, key, 5*time.Minute, fencelock.WithFairness())
		if err != nil {
			checkNoRedirect(t, err)
			t.Fatalf("%s: Acquire: %v", key, err)
		}
		before := attempts.Load()
		done := make(chan acquired, 1)
		go func() {
			wl, err := waiter.Acquire(ctx, key, 30*time.Second, fencelock.WithFairness(),
				fencelock.WithRetry(fencelock.ConstantBackoff{Delay: waitFallback}))
			done <- acquired{wl, err, time.Now()}
		}()
		// The waiter joins, attempts once more once it watches, then
		// renews its place every driver.PlaceLease/3. A release right after
		// an attempt leaves it no reason to attempt before the grant.
		pollUntil(t, 30*time.Second, key+": the waiter's first place renewal", func() bool {
			return attempts.Load() >= before+3
		})
		renewed := time.Now()
		counted := attempts.Load()
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("%s: Release: %v", key, err)
		}
		rctx, cancel := context.WithTimeout(ctx, wakeBound)
		msg, err := grants.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: no grant published on a grant channel within %v of the release: %v", key, wakeBound, err)
		}
		r := awaitWaiter(t, key, done, lk)
		sinceRenewal := time.Since(renewed)
		if !strings.HasPrefix(msg.Payload, "grant:"+r.lk.Token()+":") {
			t.Errorf("%s: the release published %q on %s, want a grant to %s", key, msg.Payload, msg.Channel, r.lk.Token())
		}
		// Unless the machine stalled the test or the waiter until its next
		// place renewal, it took the grant without an attempt.
		if n := attempts.Load() - counted; n != 0 && sinceRenewal < driver.PlaceLease/6 {
			t.Errorf("%s (node %s): the waiter made %d attempts after the release, want 0 (granted)", key, keyNode[key], n)
		}
		if err := r.lk.Release(ctx); err != nil {
			t.Errorf("%s: waiter's Release: %v", key, err)
		}
	}
}

// TestClusterMutualExclusion has 4 Clients (each with its own ClusterClient)
// × 4 goroutines take one key 20 times each: never two inside at once, and
// fences strictly increase.
func TestClusterMutualExclusion(t *testing.T) {
	t.Parallel()
	const (
		clients    = 4
		goroutines = 4
		rounds     = 20
		key        = "shared"
	)
	cl := servertest.RedisCluster(t, 3)
	ctx := topoCtx(t, 60*time.Second)
	var (
		inside, overlaps, total atomic.Int64
		mu                      sync.Mutex
		lastFence               int64
		wg                      sync.WaitGroup
	)
	for range clients {
		c := newTopoClient(t, newClusterRDB(t, cl, nil))
		for range goroutines {
			wg.Go(func() {
				for range rounds {
					lk, err := c.Acquire(ctx, key, 5*time.Second, fencelock.WithWait(30*time.Second))
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					if inside.Add(1) > 1 {
						overlaps.Add(1)
					}
					mu.Lock()
					if lk.Fence() <= lastFence {
						t.Errorf("fence %d after %d", lk.Fence(), lastFence)
					}
					lastFence = lk.Fence()
					mu.Unlock()
					time.Sleep(500 * time.Microsecond) // the holder works inside the lock
					inside.Add(-1)
					total.Add(1)
					if err := lk.Release(ctx); err != nil {
						t.Errorf("Release: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Errorf("mutual exclusion violated %d times", n)
	}
	if got, want := total.Load(), int64(clients*goroutines*rounds); got != want {
		t.Errorf("%d acquisitions, want %d", got, want)
	}
}

// TestSentinel takes, refuses, waits for and releases locks through
// go-redis FailoverClients that find the master through a real Sentinel.
func TestSentinel(t *testing.T) {
	t.Parallel()
	master, sentinel := servertest.RedisSentinel(t)
	direct := redis.NewClient(&redis.Options{Addr: master.Addr(), ReadTimeout: topoTimeout, WriteTimeout: topoTimeout})
	t.Cleanup(func() { direct.Close() })
	c1 := newTopoClient(t, newFailoverRDB(t, sentinel))
	attempts := &servertest.AcquireAttempts{}
	rdb2 := newFailoverRDB(t, sentinel)
	rdb2.AddHook(attempts)
	c2 := newTopoClient(t, rdb2)
	ctx := topoCtx(t, 5*time.Minute)
	const key = "job"

	lk1, err := c1.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if lk1.Fence() <= 0 {
		t.Fatalf("fence %d", lk1.Fence())
	}
	if n, err := direct.Exists(ctx, lockKey(fencelock.DefaultNamespace, key)).Result(); err != nil || n != 1 {
		t.Fatalf("lock key on the master: %d, %v", n, err)
	}
	if _, err := c2.TryAcquire(ctx, key, 10*time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: %v, want ErrNotAcquired", err)
	}
	// A lease far longer than the wait for the wake-up below: the waiter's
	// timer, capped at the holder's remaining lease, cannot wake it in time.
	if err := lk1.Refresh(ctx, 5*time.Minute); err != nil {
		t.Fatalf("Refresh: %v", err)
	}

	before := attempts.Load()
	done := make(chan acquired, 1)
	go func() {
		lk, err := c2.Acquire(ctx, key, 10*time.Second,
			fencelock.WithRetry(fencelock.ConstantBackoff{Delay: waitFallback}),
			fencelock.WithWait(waitFallback))
		done <- acquired{lk, err, time.Now()}
	}()
	waitSubscribed(ctx, t, map[string]*redis.Client{master.Addr(): direct}, channelOf(fencelock.DefaultNamespace, key))
	// Release once the waiter is asleep (its attempt after subscribing was
	// answered): only the release message can wake it in time.
	pollUntil(t, 30*time.Second, "two acquire attempts by the waiter", func() bool { return attempts.Load() >= before+2 })
	select {
	case r := <-done:
		t.Fatalf("waiter returned while the lock was held: %v", r.err)
	default:
	}
	start := time.Now()
	if err := lk1.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	var r acquired
	select {
	case r = <-done:
	case <-time.After(wakeBound):
		t.Fatalf("waiter not woken within %v of the release", wakeBound)
	}
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	latency := r.at.Sub(start)
	t.Logf("waiter had the lock %v after the release began", latency.Round(100*time.Microsecond))
	if r.lk.Fence() <= lk1.Fence() {
		t.Errorf("waiter's fence %d not above %d", r.lk.Fence(), lk1.Fence())
	}
	if err := r.lk.Release(ctx); err != nil {
		t.Fatalf("waiter's Release: %v", err)
	}

	lk3, err := c1.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatalf("third TryAcquire: %v", err)
	}
	if lk3.Fence() <= r.lk.Fence() {
		t.Errorf("fence %d not above %d", lk3.Fence(), r.lk.Fence())
	}
	if err := lk3.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if n, err := direct.Exists(ctx, lockKey(fencelock.DefaultNamespace, key)).Result(); err != nil || n != 0 {
		t.Errorf("lock key still on the master after Release: %d, %v", n, err)
	}
}
