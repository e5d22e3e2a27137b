package redisbackend_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// Redis spends about as much on each command a script calls as on the
// script call itself (the 9 calls in the uncontended cycle's two scripts
// take most of the server's time per cycle). These tests pin down
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

// A refused attempt (the lock is held by another owner) reads the lock
// with one HGETALL, which also tells it about the tombstone (with EXISTS's
// count) and the waited mark: only the first refusal of a hold writes the
// mark. A fair waiter's joins the line besides, and the line's expiry is
// refreshed by the first join, not by every one. In a busy line every
// acquisition makes one.
func TestRefusedAttemptCommands(t *testing.T) {
	rdb, be := backendWithoutPubSub(t)
	ctx := context.Background()
	for _, key := range []string{"warm", "refused"} { // the first loads the scripts
		if res, err := be.Acquire(ctx, request(key, "holder")); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
	}
	if _, err := be.Acquire(ctx, request("warm", "other")); err != nil {
		t.Fatal(err)
	}
	if _, err := be.AcquireInLine(ctx, request("warm", "other"), driver.Turn{Place: 2 * time.Second, Grant: 2 * time.Second, Seq: 1}); err != nil {
		t.Fatal(err)
	}

	attempt := func(fair bool, token string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			var res driver.Result
			var err error
			if fair {
				res, err = be.AcquireInLine(ctx, request("refused", token), driver.Turn{Place: 2 * time.Second, Grant: 2 * time.Second, Seq: 1})
			} else {
				res, err = be.Acquire(ctx, request("refused", token))
			}
			if err == nil && res.Acquired {
				t.Errorf("%s: acquired a held lock", token)
			}
			return err
		}
	}
	for _, tc := range []struct {
		name string
		fair bool
		want map[string]int
	}{
		{"first refusal", false, map[string]int{"evalsha": 1, "time": 1, "exists": 1, "hgetall": 1, "hset": 1}},
		{"later refusal", false, map[string]int{"evalsha": 1, "time": 1, "exists": 1, "hgetall": 1}},
		// The lock is already marked; the first join creates the line and
		// sets its expiry.
		{"first join", true, map[string]int{"evalsha": 1, "time": 1, "exists": 1, "hgetall": 1, "hincrby": 1, "zadd": 1,
			"hset": 1, "pttl": 1, "pexpire": 2}},
		{"second join", true, map[string]int{"evalsha": 1, "time": 1, "exists": 1, "hgetall": 1, "hincrby": 1, "zadd": 1,
			"hset": 1, "pttl": 1}},
	} {
		if calls := measureCommands(t, rdb, attempt(tc.fair, tc.name)); !maps.Equal(calls, tc.want) {
			t.Errorf("%s ran %s, want %s", tc.name, fmtCalls(calls), fmtCalls(tc.want))
		}
	}
	// The line outlives the places in it, by enough that the next joins
	// need not refresh it.
	for _, k := range []string{"{refused}:queue", "{refused}:queue:ends"} {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 3*time.Second {
			t.Errorf("PTTL of %s: %v, want more than the place (2s) with room to spare", k, ttl)
		}
	}
}

// A release that grants the lock to the first fair waiter, with another in
// line behind it, reads the line's first two places and the head's place
// in two calls, takes the lock for the head marked as waited for, and
// tells it: the grant is on every hand-off's path in a busy line.
func TestGrantCommands(t *testing.T) {
	rdb, be := backendWithoutPubSub(t)
	ctx := context.Background()
	for i, key := range []string{"warm", "grant"} { // the first loads the scripts
		if res, err := be.AcquireInLine(ctx, request(key, "holder"), driver.Turn{}); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		for seq, w := range []string{"first", "second"} {
			if res, err := be.AcquireInLine(ctx, request(key, w), driver.Turn{Place: 2 * time.Second, Grant: 2 * time.Second, Seq: int64(seq + 1)}); err != nil || res.Acquired {
				t.Fatal(res, err)
			}
		}
		release := func(ctx context.Context) error {
			_, err := be.Release(ctx, driver.ReleaseRequest{Ref: request(key, "holder").Ref})
			return err
		}
		if i == 0 {
			if err := release(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		calls := measureCommands(t, rdb, release)
		want := map[string]int{"evalsha": 1, "hgetall": 1, "del": 1, "time": 1, "zrange": 1, "hmget": 1,
			"zrem": 1, "hdel": 1, "getset": 1, "hset": 1, "pexpire": 1, "publish": 1}
		if !maps.Equal(calls, want) {
			t.Errorf("a release granting the lock ran %s, want %s", fmtCalls(calls), fmtCalls(want))
		}
		info, err := rdb.HGetAll(ctx, "{"+key+"}:lock").Result()
		if err != nil || info["owner"] != "first" || info["waited"] != "1" {
			t.Errorf("the lock after the grant: %v, %v; want the first waiter's, marked as waited for", info, err)
		}
	}
}

// backendWithoutPubSub starts a redis-server and returns a client of it and
// a Backend on that client without release notifications, whose pub/sub
// commands would count with the scripts'.
func backendWithoutPubSub(t testing.TB) (*redis.Client, *redisbackend.Backend) {
	t.Helper()
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	be := redisbackend.New(rdb, redisbackend.WithoutReleaseNotifications())
	t.Cleanup(func() { be.Close() })
	return rdb, be
}

// request is the acquire request of token (also its owner) for key, with a
// lease of a minute.
func request(key, token string) driver.Request {
	return driver.Request{Ref: driver.Ref{Key: key, Token: token}, Owner: token, TTL: time.Minute}
}

// The acquire scripts learn of a tombstone from the count of their first
// EXISTS and the lock key found by HGETALL, with no read of their own;
// the fair one names the tombstone twice, to tell it apart from the line.
// Every combination of a held or free lock, a line or none, and a
// tombstone or none: a tombstoned token is refused and never joins the
// line, and the others are served as without the count.
func TestTombstoneToldApart(t *testing.T) {
	rdb, be := backendWithoutPubSub(t)
	ctx := context.Background()
	tombstone := func(key, token string) {
		t.Helper()
		req := driver.ReleaseRequest{Ref: request(key, token).Ref, Tombstone: time.Minute}
		if _, err := be.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	inLine := func(key, token string) bool {
		return rdb.ZScore(ctx, "{"+key+"}:queue", token).Err() == nil
	}
	for _, fair := range []bool{false, true} {
		for _, held := range []bool{false, true} {
			for _, line := range []bool{false, true} {
				if line && !fair {
					continue
				}
				for _, tombstoned := range []bool{false, true} {
					key := fmt.Sprintf("fair=%v,held=%v,line=%v,tombstone=%v", fair, held, line, tombstoned)
					t.Run(key, func(t *testing.T) {
						acquire := func(token string) driver.Result {
							t.Helper()
							var res driver.Result
							var err error
							if fair {
								res, err = be.AcquireInLine(ctx, request(key, token), driver.Turn{Place: 2 * time.Second})
							} else {
								res, err = be.Acquire(ctx, request(key, token))
							}
							if err != nil {
								t.Fatal(err)
							}
							return res
						}
						if held || line {
							if !acquire("holder").Acquired {
								t.Fatal("holder refused")
							}
						}
						if line {
							// The line's head, then a free lock: the head's turn.
							if acquire("head").Acquired {
								t.Fatal("head acquired a held lock")
							}
							if !held {
								if _, err := be.Release(ctx, driver.ReleaseRequest{Ref: request(key, "holder").Ref}); err != nil {
									t.Fatal(err)
								}
							}
						}
						if tombstoned {
							tombstone(key, "late")
						}
						res := acquire("late")
						switch {
						case tombstoned && res.Acquired:
							t.Fatal("a tombstoned token acquired the lock")
						case tombstoned && inLine(key, "late"):
							t.Fatal("a tombstoned token joined the line")
						case !tombstoned && res.Acquired != (!held && !line):
							t.Fatalf("acquired %v, want %v", res.Acquired, !held && !line)
						case !tombstoned && fair && held && !inLine(key, "late"):
							t.Fatal("a refused fair waiter did not join the line")
						}
						if line && !held {
							// The head, untombstoned, still takes its turn.
							if !acquire("head").Acquired {
								t.Fatal("the line's head was refused the free lock")
							}
						}
					})
				}
			}
		}
	}
}
