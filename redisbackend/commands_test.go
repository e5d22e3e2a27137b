package redisbackend_test

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/servertest"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// Redis spends about as much on each command a script calls as on the
// script call itself (issue 9: 9 calls in the uncontended cycle's two
// scripts took most of the server's time per cycle). These tests pin down
// the commands of the uncontended path, so that one more cannot creep in.

// commandCalls returns the calls per command since the last CONFIG
// RESETSTAT, without the INFO and CONFIG calls of the test itself.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || name == "info" || name == "config|resetstat" || name == "config" {
			continue
		}
		n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		calls[name] = n
	}
	return calls
}

// measureCommands runs op once and returns the commands Redis ran for it.
func measureCommands(t *testing.T, rdb *redis.Client, op func(context.Context) error) map[string]int {
	t.Helper()
	ctx := context.Background()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := op(ctx); err != nil {
		t.Fatal(err)
	}
	return commandCalls(t, rdb)
}

func fmtCalls(calls map[string]int) string {
	var s []string
	for _, name := range slices.Sorted(maps.Keys(calls)) {
		s = append(s, name+"="+strconv.Itoa(calls[name]))
	}
	return strings.Join(s, " ")
}

func TestUncontendedCommands(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	for _, tc := range []struct {
		name    string
		opts    []fencelock.Option
		acquire []fencelock.AcquireOption
	}{
		{name: "plain"},
		// The identity goes in the same HSET as the hold.
		{name: "identity", opts: []fencelock.Option{fencelock.WithIdentity("worker-1")}},
		// With no line and no holder, a fair acquire costs what a plain
		// one does.
		{name: "fair", acquire: []fencelock.AcquireOption{fencelock.WithFairness()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fencelock.New(redisbackend.New(rdb), tc.opts...)
			t.Cleanup(func() { c.Close() })
			ctx := context.Background()
			// Load the scripts (EVAL) before counting.
			lk, err := c.Acquire(ctx, "warm-"+tc.name, 10*time.Second, tc.acquire...)
			if err != nil {
				t.Fatal(err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}

			key := "cycle-" + tc.name
			acquire := measureCommands(t, rdb, func(ctx context.Context) error {
				lk, err = c.Acquire(ctx, key, 10*time.Second, tc.acquire...)
				return err
			})
			want := map[string]int{"evalsha": 1, "time": 1, "exists": 1, "getset": 1, "hset": 1, "pexpire": 1}
			if !maps.Equal(acquire, want) {
				t.Errorf("uncontended Acquire ran %s, want %s", fmtCalls(acquire), fmtCalls(want))
			}
			if tc.name == "identity" {
				if id, err := rdb.HGet(ctx, fencelock.DefaultNamespace+":{"+key+"}:lock", "id").Result(); id != "worker-1" {
					t.Errorf("identity stored as %q (%v), want worker-1", id, err)
				}
			}
			release := measureCommands(t, rdb, func(ctx context.Context) error { return lk.Release(ctx) })
			want = map[string]int{"evalsha": 1, "hgetall": 1, "del": 1}
			if !maps.Equal(release, want) {
				t.Errorf("Release of the only hold ran %s, want %s", fmtCalls(release), fmtCalls(want))
			}
		})
	}
}
