package rueidistransport_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/driver/drivertest"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redisbackend/rueidistransport"
	"github.com/fencelock/fencelock/testing/faultproxy"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// newRueidis returns a rueidis client of opt (client-side caching off),
// closed at cleanup.
func newRueidis(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	opt.DisableCache = true
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(client.Close)
	return client
}

// newBackend returns a Backend on client with opts, closed at cleanup.
func newBackend(t testing.TB, client rueidis.Client, opts ...redisbackend.Option) *redisbackend.Backend {
	b := rueidistransport.NewBackend(client, opts...)
	t.Cleanup(func() { b.Close() })
	return b
}

// driverAckTimeout bounds the wait for a replica's acknowledgement in
// TestDriver. WAIT returns as soon as the replica acknowledges, so the
// bound costs nothing; on a busy machine (stress-ng beside servers that
// run at the tests' nice level) an acknowledgement has taken over a
// second, and the suite counts ErrNotReplicated as a failure.
const driverAckTimeout = 10 * time.Second

// The Backend on rueidis keeps the driver contract, for every kind of
// hold, on a single node, a Sentinel group with replicas and a Cluster
// with replicas, each with and without replica acknowledgement.
func TestDriver(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := servertest.Redis(t)
		client := newRueidis(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
		drivertest.Run(t, func(t *testing.T) driver.Store { return newBackend(t, client) })
	})
	t.Run("replica-ack", func(t *testing.T) {
		addr := masterWithReplica(t)
		client := newRueidis(t, rueidis.ClientOption{InitAddress: []string{addr}})
		drivertest.Run(t, func(t *testing.T) driver.Store {
			return newBackend(t, client, redisbackend.WithReplicaAck(1, driverAckTimeout))
		})
	})
	t.Run("sentinel-replicas", func(t *testing.T) {
		group := servertest.RedisSentinelGroup(t)
		client := newRueidis(t, rueidis.ClientOption{InitAddress: group.SentinelAddrs(),
			Sentinel: rueidis.SentinelOption{MasterSet: group.Name()}})
		drivertest.Run(t, func(t *testing.T) driver.Store { return newBackend(t, client) })
		t.Run("replica-ack", func(t *testing.T) {
			drivertest.Run(t, func(t *testing.T) driver.Store {
				return newBackend(t, client, redisbackend.WithReplicaAck(1, driverAckTimeout))
			})
		})
	})
	t.Run("cluster-replicas", func(t *testing.T) {
		cluster := servertest.RedisClusterWithReplicas(t, 3)
		client := newRueidis(t, rueidis.ClientOption{InitAddress: cluster.Addrs()})
		drivertest.Run(t, func(t *testing.T) driver.Store {
			return newBackend(t, client, redisbackend.WithReplicaAck(1, driverAckTimeout))
		})
	})
	t.Run("cluster", func(t *testing.T) {
		cluster := servertest.RedisCluster(t, 3)
		client := newRueidis(t, rueidis.ClientOption{InitAddress: cluster.Addrs()})
		drivertest.Run(t, func(t *testing.T) driver.Store { return newBackend(t, client) })
	})
}

// masterWithReplica starts a master and a replica that acknowledges its
// writes (WAIT counts it), and returns the master's address.
func masterWithReplica(t *testing.T) string {
	t.Helper()
	master := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rdb.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	servertest.Redis(t, "--replicaof", "127.0.0.1", fmt.Sprint(master.Port()))
	// A write the replica acknowledged, on one connection as WAIT needs:
	// after a diskless sync the first acknowledgement can take a second.
	for {
		var wait *redis.IntCmd
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "test:replica-ack-probe", "1", time.Second)
			wait = redis.NewIntCmd(ctx, "WAIT", 1, 200)
			return p.Process(ctx, wait)
		})
		if err == nil && wait.Val() == 1 {
			return master.Addr()
		}
		if ctx.Err() != nil {
			t.Fatalf("the replica never acknowledged a write: %v", err)
		}
	}
}

// A Client on go-redis and a Client on rueidis share locks: each excludes
// the other, and a waiter on one is woken by pub/sub when the other
// releases (the holder's lease, 30 s, is far longer than the wait
// allowed, 10 s, so only the release message can wake it in time).
func TestGoRedisAndRueidisShareLocks(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	onGoRedis := fencelock.New(redisbackend.New(rdb))
	t.Cleanup(func() { onGoRedis.Close() })
	onRueidis := fencelock.New(newBackend(t, newRueidis(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})))
	t.Cleanup(func() { onRueidis.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, c := range []struct {
		name           string
		holder, waiter *fencelock.Client
	}{
		{"go-redis holds, rueidis waits", onGoRedis, onRueidis},
		{"rueidis holds, go-redis waits", onRueidis, onGoRedis},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "shared:" + strings.ReplaceAll(c.name, " ", "-")
			held, err := c.holder.TryAcquire(ctx, key, 30*time.Second)
			if err != nil {
				t.Fatalf("holder: %v", err)
			}
			if _, err := c.waiter.TryAcquire(ctx, key, 30*time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
				t.Fatalf("the other client's TryAcquire of a held lock: %v, want ErrNotAcquired", err)
			}
			got := make(chan *fencelock.Lock, 1)
			waitErr := make(chan error, 1)
			go func() {
				lk, err := c.waiter.Acquire(ctx, key, 30*time.Second, fencelock.WithWait(10*time.Second))
				got <- lk
				waitErr <- err
			}()
			// The waiter is subscribed once a release message reaches
			// it: PUBSUB NUMSUB counts it.
			waitSubscribed(t, ctx, rdb, key)
			if err := held.Release(ctx); err != nil {
				t.Fatalf("holder's release: %v", err)
			}
			lk := <-got
			if err := <-waitErr; err != nil {
				t.Fatalf("waiter on the other client: %v (not woken by the release)", err)
			}
			if lk.Fence() <= held.Fence() {
				t.Errorf("waiter's fence %d, want above the holder's %d", lk.Fence(), held.Fence())
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// waitSubscribed waits until a client is subscribed to the release channel
// of key (the default namespace's).
func waitSubscribed(t *testing.T, ctx context.Context, rdb *redis.Client, key string) {
	t.Helper()
	channel := "lock:{" + key + "}:released"
	for {
		n, err := rdb.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n[channel] > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no subscriber on %s", channel)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Requests that were certainly not sent match driver.ErrNotSent (no
// clean-up is needed): on a closed client, and with a context already
// over. Redis's refusals match driver.ErrMisconfigured, and ErrNotSent too
// when nothing of the request ran.
func TestNotSentAndRefused(t *testing.T) {
	srv := servertest.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := func(key string) driver.Request {
		return driver.Request{Ref: driver.Ref{Kind: driver.KindLock, Namespace: "lock", Key: key, Token: "tok"}, Owner: "tok", TTL: 10 * time.Second}
	}

	t.Run("closed client", func(t *testing.T) {
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		b := rueidistransport.NewBackend(client)
		defer b.Close()
		client.Close()
		_, err = b.Acquire(ctx, req("closed"))
		if !errors.Is(err, driver.ErrNotSent) {
			t.Errorf("Acquire on a closed client: %v, want ErrNotSent", err)
		}
	})
	t.Run("context over", func(t *testing.T) {
		b := newBackend(t, newRueidis(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}}))
		over, stop := context.WithCancel(ctx)
		stop()
		if _, err := b.Acquire(over, req("over")); !errors.Is(err, driver.ErrNotSent) {
			t.Errorf("Acquire with a context over: %v, want ErrNotSent", err)
		}
	})
	t.Run("no permission", func(t *testing.T) {
		admin := servertest.RedisAdmin(t, srv)
		servertest.SetRedisUser(t, admin, "locker", "reset", "on", ">right", "~other:*", "&*", "+@all")
		b := newBackend(t, newRueidis(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Username: "locker", Password: "right"}))
		_, err := b.Acquire(ctx, req("refused"))
		if !errors.Is(err, driver.ErrMisconfigured) || !errors.Is(err, driver.ErrNotSent) {
			t.Errorf("Acquire of a key the user may not use: %v, want ErrMisconfigured and ErrNotSent", err)
		}
		servertest.SetRedisUser(t, admin, "locker", "resetchannels")
		_, err = b.Watch(ctx, driver.WatchRequest{Ref: req("refused-channel").Ref})
		if !errors.Is(err, driver.ErrMisconfigured) {
			t.Errorf("Watch on a channel the user may not use: %v, want ErrMisconfigured", err)
		}
	})
}

// A holder whose renewals' replies stall on a connection that its other
// locks share (rueidis pipelines every call on it) learns of the loss
// (Lock.Done, ErrLost) before its lease ends on the server. Each lock's
// lease on the server is read once the stall has begun (renewals the
// server applies after that can only extend it): Done must close before
// it ends. When requests stall too, nothing reaches the server after
// that, the Client's clean-up release included, so PTTL must still be
// positive when Done closes.
func TestStalledRepliesLoseBeforeTheServerLease(t *testing.T) {
	for _, c := range []struct {
		name  string
		stall func(p *faultproxy.Proxy) (resume func())
		both  bool
	}{
		{"replies", (*faultproxy.Proxy).StallReplies, false},
		{"both ways", (*faultproxy.Proxy).Stall, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := servertest.Redis(t)
			p := faultproxy.New(t, srv.Addr())
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { rdb.Close() })
			client := newRueidis(t, rueidis.ClientOption{InitAddress: []string{p.Addr()}})
			locks := fencelock.New(newBackend(t, client))
			t.Cleanup(func() { locks.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			const ttl = 2 * time.Second
			var held []*fencelock.Lock
			for i := range 4 {
				lk, err := locks.TryAcquire(ctx, fmt.Sprintf("stalled-%d", i), ttl)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, lk)
			}
			lockKey := func(i int) string { return fmt.Sprintf("lock:{stalled-%d}:lock", i) }
			resume := c.stall(p)
			defer resume()
			serverEnds := make([]time.Time, len(held))
			for i := range held {
				before := time.Now()
				pttl, err := rdb.PTTL(ctx, lockKey(i)).Result()
				if err != nil || pttl <= 0 {
					t.Fatalf("lock %d: PTTL %v, %v at the stall", i, pttl, err)
				}
				serverEnds[i] = before.Add(pttl) // at the earliest
			}
			for i, lk := range held {
				select {
				case <-lk.Done():
				case <-ctx.Done():
					t.Fatalf("lock %d: no loss signal", i)
				}
				lost := time.Now()
				if !lost.Before(serverEnds[i]) {
					t.Errorf("lock %d: Done closed %v after the server's lease ended", i, lost.Sub(serverEnds[i]))
				}
				if !errors.Is(lk.Err(), fencelock.ErrLost) {
					t.Errorf("lock %d: Err = %v, want ErrLost", i, lk.Err())
				}
				if c.both {
					pttl, err := rdb.PTTL(ctx, lockKey(i)).Result()
					if err != nil || pttl <= 0 {
						t.Errorf("lock %d: PTTL %v, %v when Done closed; want the server's lease still running", i, pttl, err)
					}
				}
				t.Logf("lock %d: lost %v before the server's lease ended", i, serverEnds[i].Sub(lost).Round(time.Millisecond))
			}
		})
	}
}

// After its pub/sub connection breaks, the rueidis transport connects
// again and subscribes again: a watch made before the break is woken by a
// release message published after it.
func TestWatchSurvivesAReconnection(t *testing.T) {
	srv := servertest.Redis(t)
	p := faultproxy.New(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	b := newBackend(t, newRueidis(t, rueidis.ClientOption{InitAddress: []string{p.Addr()}}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const key = "reconnect"
	w, err := b.Watch(ctx, driver.WatchRequest{Ref: driver.Ref{Kind: driver.KindLock, Namespace: "lock", Key: key}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	waitSubscribed(t, ctx, rdb, key)
	if n := p.ResetAll(); n == 0 {
		t.Fatal("no connection to reset")
	}
	// The break wakes every watch (a release may have been missed).
	select {
	case <-w.C:
	case <-ctx.Done():
		t.Fatal("the watch was not woken by the connection's loss")
	}
	// Until the server has dropped the old connection, a message may go
	// to it: publish until one reaches the watch.
	for {
		if err := rdb.Publish(ctx, "lock:{"+key+"}:released", "released").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.C:
			return
		case <-ctx.Done():
			t.Fatal("the watch was not woken by a release after the reconnection")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Inspect reads RESP3's shapes through rueidis as it reads go-redis's:
// the holder, its lease, and the processes subscribed to the lock's
// channel.
func TestInspect(t *testing.T) {
	srv := servertest.Redis(t)
	b := newBackend(t, newRueidis(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := driver.Request{Ref: driver.Ref{Kind: driver.KindLock, Namespace: "lock", Key: "inspected", Token: "tok"}, Owner: "owner", TTL: 10 * time.Second}
	res, err := b.Acquire(ctx, req)
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire: %+v, %v", res, err)
	}
	w, err := b.Watch(ctx, driver.WatchRequest{Ref: driver.Ref{Kind: driver.KindLock, Namespace: "lock", Key: "inspected"}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	info, err := b.Inspect(ctx, "lock", "inspected")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Owner != "owner" || info.Fence != res.Fence || info.TTL <= 0 || info.TTL > 10*time.Second ||
		len(info.Holds) != 1 || info.LastFence != res.Fence || info.Waiters != 1 {
		t.Errorf("Inspect = %+v; want held by owner with fence %d, one hold, a lease of at most 10s, one waiter", info, res.Fence)
	}
}
