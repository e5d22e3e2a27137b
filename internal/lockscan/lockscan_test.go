package lockscan_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/leakcheck"
	"github.com/fencelock/fencelock/internal/lockscan"
	"github.com/fencelock/fencelock/internal/servertest"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }

func TestSplitLockKey(t *testing.T) {
	for _, tc := range []struct {
		in, ns, name string
		ok           bool
	}{
		{"lock:{orders}:lock", "lock", "orders", true},
		{"lock:{orders:42}:lock", "lock", "orders:42", true},
		{"app:v2:{a}b}:lock", "app:v2", "a}b", true},
		{"{orders}:lock", "", "orders", true},
		{"lock:{}:lock", "", "", false},
		{"lock:{orders}:fence", "", "", false},
		{"orders", "", "", false},
		{"lock{orders}:lock", "", "", false},
		{":{orders}:lock", "", "", false},
	} {
		ns, name, ok := lockscan.SplitLockKey(tc.in)
		if ns != tc.ns || name != tc.name || ok != tc.ok {
			t.Errorf("SplitLockKey(%q) = %q, %q, %v; want %q, %q, %v", tc.in, ns, name, ok, tc.ns, tc.name, tc.ok)
		}
	}
}

// List finds the held locks of one namespace only, on one node and on
// every master of a Cluster, with their identity when they have one.
func TestList(t *testing.T) {
	srv := servertest.Redis(t)
	single := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { single.Close() })
	cluster := servertest.ClusterClient(t, servertest.RedisCluster(t, 3))
	for name, rdb := range map[string]redis.UniversalClient{"single": single, "cluster": cluster} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			app := fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace("app"), fencelock.WithIdentity("web-1:77"))
			defer app.Close()
			other := fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace("app:other"))
			defer other.Close()
			var want []string
			for i := range 12 { // enough keys to land on every master
				key := fmt.Sprintf("order:%02d", i)
				if _, err := app.TryAcquire(ctx, key, time.Minute); err != nil {
					t.Fatal(err)
				}
				want = append(want, key)
			}
			if _, err := other.TryAcquire(ctx, "order:99", time.Minute); err != nil {
				t.Fatal(err)
			}
			b := redisbackend.New(rdb, redisbackend.WithoutReleaseNotifications())
			defer b.Close()
			got, err := lockscan.List(ctx, rdb, b, "app")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lockscan.List(ctx, rdb, b, "a{b"); !errors.Is(err, fencelock.ErrInvalidArgument) {
				t.Errorf("List of namespace a{b: %v, want ErrInvalidArgument", err)
			}
			if len(got) != len(want) {
				t.Fatalf("List found %d locks, want %d: %+v", len(got), len(want), got)
			}
			for i, l := range got {
				if l.Name != want[i] || l.Identity != "web-1:77" || !l.Held || l.Fence == 0 || l.TTL <= 0 {
					t.Errorf("lock %d: %+v, want %s held by web-1:77", i, l, want[i])
				}
			}
		})
	}
}
