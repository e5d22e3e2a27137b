package redisbackend_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// refusedBackend starts a redis-server with the user "locker" (password
// "right", allowed everything) and returns a Backend logged in as it
// (closed at cleanup), its go-redis client, and an admin client that
// changes locker's rights (servertest.SetRedisUser).
func refusedBackend(t *testing.T) (*redisbackend.Backend, *redis.Client, *redis.Client) {
	t.Helper()
	srv := servertest.Redis(t)
	admin := servertest.RedisAdmin(t, srv)
	servertest.SetRedisUser(t, admin, "locker", "reset", "on", ">right", "~*", "&*", "+@all")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "locker", Password: "right", MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	b := redisbackend.New(rdb)
	t.Cleanup(func() { b.Close() })
	return b, rdb, admin
}

// wantRefused fails the test unless err matches fencelock.ErrMisconfigured.
func wantRefused(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, fencelock.ErrMisconfigured) {
		t.Errorf("%s: %v; want an error matching ErrMisconfigured", what, err)
	}
}

// Every call path of the Backend marks Redis's refusals of the client's
// permissions (NOPERM) with fencelock.ErrMisconfigured, whether the
// command went alone, in a pipeline of the coalescer (concurrent
// acquires), or in a renewal batch (one request per lock, or one script
// for many).
func TestRefusalsMatchErrMisconfigured(t *testing.T) {
	b, _, admin := refusedBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held := acquireReq("held", "tok", "tok", 10*time.Second)
	if res, err := b.Acquire(ctx, held); err != nil || !res.Acquired {
		t.Fatalf("Acquire before the ACL change: %+v, %v", res, err)
	}
	servertest.SetRedisUser(t, admin, "locker", "resetkeys", "~other:*") // no more keys of ours

	_, err := b.Acquire(ctx, acquireReq("k", "a", "a", 10*time.Second))
	wantRefused(t, "Acquire", err)
	if !errors.Is(err, fencelock.ErrNotSent) {
		t.Errorf("Acquire: %v; want it to match ErrNotSent too (refused before it ran)", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = b.Acquire(ctx, acquireReq("k", string(rune('a'+i)), string(rune('a'+i)), 10*time.Second))
		})
	}
	wg.Wait()
	for _, err := range errs {
		wantRefused(t, "concurrent Acquire", err)
	}
	_, err = b.Release(ctx, driver.ReleaseRequest{Ref: held.Ref})
	wantRefused(t, "Release", err)
	_, err = b.TTL(ctx, held.Ref)
	wantRefused(t, "TTL", err)
	one, err := b.Renew(ctx, []driver.RenewRequest{{Ref: held.Ref, TTL: 10 * time.Second}})
	if err == nil && len(one) == 1 {
		err = one[0].Err
	}
	wantRefused(t, "Renew of one lock", err)
	many, err := b.Renew(ctx, []driver.RenewRequest{{Ref: held.Ref, TTL: 10 * time.Second}, {Ref: held.Ref, TTL: 10 * time.Second}})
	if err == nil && len(many) == 2 {
		err = errors.Join(many[0].Err, many[1].Err)
	}
	wantRefused(t, "Renew of two locks", err)
	permit := acquireReq("s", "p", "p", 10*time.Second)
	permit.Kind, permit.Permits = driver.KindSemaphore, 2
	_, err = b.Acquire(ctx, permit)
	wantRefused(t, "Acquire of a permit", err)
	write := acquireReq("rw", "w", "w", 10*time.Second)
	write.Kind = driver.KindWrite
	_, err = b.Acquire(ctx, write)
	wantRefused(t, "Acquire of a write hold", err)
	_, err = b.AcquireInLine(ctx, acquireReq("f", "f", "f", 10*time.Second), driver.Turn{Place: time.Second})
	wantRefused(t, "AcquireInLine", err)
	_, err = b.Inspect(ctx, "t", "held")
	wantRefused(t, "Inspect", err)
	wantRefused(t, "Check", b.Check(ctx, "t"))
}

// Release notifications: a user denied the channels gets its watch
// refused at once (not after the readiness timeout, as a watch whose
// subscription is merely slow), and so does a pub/sub connection whose
// login is refused (the password changed after the other connections
// logged in). Check reports the channels too. A later watch tries again,
// and succeeds once the ACL allows it.
func TestWatchRefused(t *testing.T) {
	b, _, admin := refusedBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held := acquireReq("held", "a", "a", 10*time.Second)
	if res, err := b.Acquire(ctx, held); err != nil || !res.Acquired {
		t.Fatalf("Acquire: %+v, %v", res, err)
	}
	if res, err := b.Acquire(ctx, acquireReq("held", "b", "b", 10*time.Second)); err != nil || res.Acquired {
		t.Fatalf("Acquire of the held lock: %+v, %v", res, err) // marks it waited for: its release publishes
	}
	servertest.SetRedisUser(t, admin, "locker", "resetchannels")
	// The script's PUBLISH is refused after its release was applied.
	_, err := b.Release(ctx, driver.ReleaseRequest{Ref: held.Ref})
	wantRefused(t, "Release that publishes", err)
	if errors.Is(err, fencelock.ErrNotSent) {
		t.Errorf("Release that publishes: %v matches ErrNotSent, though the script ran up to its PUBLISH", err)
	}
	wantRefused(t, "Check", b.Check(ctx, "t"))
	w, err := b.Watch(ctx, driver.WatchRequest{Ref: driver.Ref{Namespace: "t", Key: "k"}})
	wantRefused(t, "Watch without channels", err)
	if w != nil {
		w.Stop()
	}
	w, err = b.Watch(ctx, driver.WatchRequest{Ref: driver.Ref{Namespace: "t", Key: "k", Token: "tok"}})
	wantRefused(t, "Watch of a turn without channels", err)
	if w != nil {
		w.Stop()
	}

	servertest.SetRedisUser(t, admin, "locker", "&*")
	w, err = b.Watch(ctx, driver.WatchRequest{Ref: driver.Ref{Namespace: "t", Key: "k"}})
	if err != nil {
		t.Fatalf("Watch once the channels are allowed: %v", err)
	}
	w.Stop()
	if err := b.Check(ctx, "t"); err != nil {
		t.Errorf("Check once the channels are allowed: %v", err)
	}

	// A fresh Backend whose pub/sub connection is the only new one.
	srvAddr := admin.Options().Addr
	rdb := redis.NewClient(&redis.Options{Addr: srvAddr, Username: "locker", Password: "right", MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	fresh := redisbackend.New(rdb)
	t.Cleanup(func() { fresh.Close() })
	if err := fresh.Check(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	servertest.SetRedisUser(t, admin, "locker", "resetpass", ">changed")
	w, err = fresh.Watch(ctx, driver.WatchRequest{Ref: driver.Ref{Namespace: "t", Key: "k"}})
	wantRefused(t, "Watch on a connection whose login is refused", err)
	if w != nil {
		w.Stop()
	}
}
