package lockscan_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/cmd/internal/lockscan"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/leaktest"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

func TestSplitKey(t *testing.T) {
	lock := []fencelock.Kind{fencelock.KindLock}
	sem := []fencelock.Kind{fencelock.KindSemaphore}
	rw := []fencelock.Kind{fencelock.KindRead, fencelock.KindWrite}
	for _, tc := range []struct {
		in, ns, name string
		kinds        []fencelock.Kind
		ok           bool
	}{
		{"lock:{orders}:lock", "lock", "orders", lock, true},
		{"lock:{orders:42}:lock", "lock", "orders:42", lock, true},
		{"app:v2:{a}b}:lock", "app:v2", "a}b", lock, true},
		{"{orders}:lock", "", "orders", lock, true},
		{"lock:{partner-api}:sem", "lock", "partner-api", sem, true},
		{"lock:{doc}:rw", "lock", "doc", rw, true},
		{"{doc}:rw", "", "doc", rw, true},
		{"lock:{}:lock", "", "", nil, false},
		{"lock:{orders}:fence", "", "", nil, false},
		{"lock:{partner-api}:sem:info", "", "", nil, false},
		{"lock:{partner-api}:sem:fence", "", "", nil, false},
		{"lock:{doc}:rw:writers", "", "", nil, false},
		{"lock:{doc}:tombstone:abcw", "", "", nil, false},
		{"orders", "", "", nil, false},
		{"lock{orders}:lock", "", "", nil, false},
		{":{orders}:lock", "", "", nil, false},
	} {
		k, ok := lockscan.SplitKey(tc.in)
		if k.Namespace != tc.ns || k.Name != tc.name || !slices.Equal(k.Kinds, tc.kinds) || ok != tc.ok {
			t.Errorf("SplitKey(%q) = %+v, %v; want %q, %q, %v, %v", tc.in, k, ok, tc.ns, tc.name, tc.kinds, tc.ok)
		}
	}
}

func TestLooksLikeKey(t *testing.T) {
	for in, want := range map[string]bool{
		"lock:{partner-api}:sem:info": true,
		"lock:{orders}:fence":         true,
		"{orders}:fence":              true,
		"lock:{orders}:lock":          true,
		"orders:42":                   false,
		"orders{1}":                   false,
		"a:b{c}:d":                    false,
		"lock:{orders}":               false,
		"lock:{}:lock":                false,
		":{orders}:lock":              false,
	} {
		if got := lockscan.LooksLikeKey(in); got != want {
			t.Errorf("LooksLikeKey(%q) = %v, want %v", in, got, want)
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
			// A name with permits only, and one with a read hold only.
			if _, err := app.Semaphore("partner-api", 3).TryAcquire(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			if _, err := app.RWLock("doc").TryAcquireRead(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			want = append([]string{"doc"}, want...)
			want = append(want, "partner-api")
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
				switch l.Name {
				case "doc", "partner-api":
					if l.Name != want[i] || l.Held || len(l.Others) != 1 || l.Others[0].Fence == 0 || l.Others[0].TTL <= 0 {
						t.Errorf("name %d: %+v, want %s with one hold of another kind", i, l, want[i])
					}
				default:
					if l.Name != want[i] || l.Identity != "web-1:77" || !l.Held || l.Fence == 0 || l.TTL <= 0 {
						t.Errorf("lock %d: %+v, want %s held by web-1:77", i, l, want[i])
					}
				}
			}
		})
	}
}
