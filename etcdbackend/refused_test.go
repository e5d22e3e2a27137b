package etcdbackend_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/etcdbackend/testing/etcdserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// authCluster starts a private 1-member cluster with authentication on: the
// user "root" (password "root"), and "locker" (password "pw") whose role
// "locks" may read and write the default namespace's keys. It returns the
// cluster's endpoints and a client logged in as root.
func authCluster(t *testing.T) ([]string, *clientv3.Client) {
	t.Helper()
	c := etcdserver.New(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	setup := newClient(t, c.Endpoints()...)
	for _, step := range []func() error{
		func() error { _, err := setup.UserAdd(ctx, "root", "root"); return err },
		func() error { _, err := setup.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := setup.RoleAdd(ctx, "locks"); return err },
		func() error {
			_, err := setup.RoleGrantPermission(ctx, "locks", "lock/", clientv3.GetPrefixRangeEnd("lock/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := setup.UserAdd(ctx, "locker", "pw"); return err },
		func() error { _, err := setup.UserGrantRole(ctx, "locker", "locks"); return err },
		func() error { _, err := setup.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("enabling authentication: %v", err)
		}
	}
	return c.Endpoints(), clientAs(t, c.Endpoints(), "root", "root")
}

// clientAs returns an etcd client of endpoints logged in as user (none when
// ""), closed at cleanup.
func clientAs(t *testing.T, endpoints []string, user, password string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: user, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// A cluster with authentication on refuses a client without a user ("user
// name is empty") and a user whose roles do not cover the keys
// ("permission denied"): Check and a waiting Acquire (one attempt) fail
// at once with ErrMisconfigured; a held lock whose user's permission is
// revoked is lost at the first refused renewal. (A refused watch is not
// seen: the etcd client answers it with silence, and retries it inside;
// a waiter's attempt, refused, comes before its watch.)
func TestRefusedByEtcd(t *testing.T) {
	endpoints, root := authCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := root.UserAdd(ctx, "outsider", "pw"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, user, password string }{
		{"no user", "", ""},
		{"no permission", "outsider", "pw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var last fencelock.AcquireEvent
			hooks := fencelock.Hooks{AcquireDone: func(_ context.Context, e fencelock.AcquireEvent) { mu.Lock(); last = e; mu.Unlock() }}
			b := etcdbackend.New(clientAs(t, endpoints, tc.user, tc.password))
			c := fencelock.New(b, fencelock.WithHooks(hooks))
			t.Cleanup(func() { c.Close() })
			if err := c.Check(ctx); !errors.Is(err, fencelock.ErrMisconfigured) || errors.Is(err, fencelock.ErrUnavailable) {
				t.Errorf("Check: %v; want ErrMisconfigured", err)
			}
			_, err := c.Acquire(ctx, "k", 5*time.Second, fencelock.WithWait(5*time.Second))
			if !errors.Is(err, fencelock.ErrMisconfigured) || errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrNotAcquired) {
				t.Errorf("Acquire: %v; want ErrMisconfigured", err)
			}
			mu.Lock()
			if last.Attempts != 1 || last.Outcome != "misconfigured" {
				t.Errorf("Acquire: %d attempts, outcome %v; want 1, misconfigured", last.Attempts, last.Outcome)
			}
			mu.Unlock()
		})
	}

	t.Run("renewal refused", func(t *testing.T) {
		lost := make(chan fencelock.LostEvent, 2)
		hooks := fencelock.Hooks{Lost: func(e fencelock.LostEvent) { lost <- e }}
		c := fencelock.New(etcdbackend.New(clientAs(t, endpoints, "locker", "pw")), fencelock.WithHooks(hooks))
		t.Cleanup(func() { c.Close() })
		if err := c.Check(ctx); err != nil {
			t.Fatal(err)
		}
		lk, err := c.Acquire(ctx, "renewed", 10*time.Second, fencelock.WithAutoRenew(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := root.RoleRevokePermission(ctx, "locks", "lock/", clientv3.GetPrefixRangeEnd("lock/")); err != nil {
			t.Fatal(err)
		}
		// Its deadline is 9s away: the bounds only keep a broken test from
		// hanging. The Lost hook runs after Done is closed, in the goroutine
		// that ended the lock: the test waits for each.
		select {
		case <-lk.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("the lock whose renewal was refused did not end")
		}
		if err := lk.Err(); !errors.Is(err, fencelock.ErrLost) || !errors.Is(err, fencelock.ErrMisconfigured) {
			t.Errorf("Err: %v; want ErrLost and ErrMisconfigured", err)
		}
		select {
		case e := <-lost:
			if e.Reason != "refused" {
				t.Errorf("Lost event %+v; want reason refused", e)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no Lost event")
		}
		c.Close()
		if len(lost) != 0 {
			t.Errorf("a second Lost event: %+v", <-lost)
		}
	})
}
