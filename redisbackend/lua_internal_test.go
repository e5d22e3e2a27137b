package redisbackend

import (
	"context"
	"errors"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// luaCase is one script of the package: the file of lua/ it is built from,
// and a smoke run against a real server, on keys of its own hash tag.
type luaCase struct {
	file  string
	s     script
	smoke func(t *testing.T, ctx context.Context, rdb *redis.Client)
}

// luaCases lists every script. Each smoke run calls its script with
// EVALSHA after the test's SCRIPT LOAD (others it needs with EVAL), and
// checks replies and writes that only the script gives.
var luaCases = []luaCase{
	{"check.lua", checkScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		wantReply(t, evalSHA(t, ctx, rdb, checkScript, nil), int64(1))
	}},
	{"acquire.lua", acquireScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		keys := []string{"{acq}:lock", "{acq}:fence", "{acq}:tomb"}
		reply := evalSHA(t, ctx, rdb, acquireScript, keys, "owner", "tok", 10000, 0, 0)
		wantTaken(t, reply)
		// Re-entry by the same owner adds a hold with the same fence.
		again := evalSHA(t, ctx, rdb, acquireScript, keys, "owner", "tok2", 10000, 0, 0)
		wantReply(t, again, []any{int64(1), reply, int64(2)})
		// Another owner is refused with the holder's lease.
		refused := evalSHA(t, ctx, rdb, acquireScript, keys, "other", "tok3", 10000, 0, 0).([]any)
		if refused[0] != int64(0) || refused[3].(int64) <= 0 {
			t.Errorf("another owner's attempt: %v, want a refusal with the holder's lease", refused)
		}
	}},
	{"release.lua", releaseScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		wantTaken(t, eval(t, ctx, rdb, acquireScript, []string{"{rel}:lock", "{rel}:fence", "{rel}:tomb"}, "owner", "tok", 10000, 0, 0))
		keys := []string{"{rel}:lock", "{rel}:tomb", "{rel}:queue", "{rel}:queue:ends", "{rel}:fence"}
		args := []any{"tok", "{rel}:released", 0, 0, "", "0", 0}
		wantReply(t, evalSHA(t, ctx, rdb, releaseScript, keys, args...), int64(0))
		wantReply(t, evalSHA(t, ctx, rdb, releaseScript, keys, args...), int64(-1))
		wantExists(t, ctx, rdb, "{rel}:lock", false)
	}},
	{"renew.lua", renewScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		wantReply(t, evalSHA(t, ctx, rdb, renewScript, []string{"{ren}:lock"}, "tok", 10000), int64(0))
		wantTaken(t, eval(t, ctx, rdb, acquireScript, []string{"{ren}:lock", "{ren}:fence", "{ren}:tomb"}, "owner", "tok", 1000, 0, 0))
		wantReply(t, evalSHA(t, ctx, rdb, renewScript, []string{"{ren}:lock"}, "tok", 60000), int64(1))
		if pttl := rdb.PTTL(ctx, "{ren}:lock").Val(); pttl < 30*time.Second {
			t.Errorf("lock key expires in %v after a renewal to 60s", pttl)
		}
	}},
	{"renew_many.lua", renewManyScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		wantTaken(t, eval(t, ctx, rdb, acquireScript, []string{"{rm}:a", "{rm}:fence", "{rm}:tomb"}, "owner", "tok", 1000, 0, 0))
		if err := rdb.Set(ctx, "{rm}:str", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		reply := evalSHA(t, ctx, rdb, renewManyScript, []string{"{rm}:a", "{rm}:b", "{rm}:str"}, "tok", 10000, "tok", 10000, "tok", 10000).([]any)
		if len(reply) != 3 || reply[0] != int64(1) || reply[1] != int64(0) || !strings.HasPrefix(reply[2].(string), "WRONGTYPE") {
			t.Errorf("reply %v, want [1 0 WRONGTYPE...]", reply)
		}
	}},
	{"ttl.lua", ttlScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		wantReply(t, evalSHA(t, ctx, rdb, ttlScript, []string{"{ttl}:lock"}, "tok"), int64(-2))
	}},
	{"leave_line.lua", leaveLineScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		if err := rdb.HSet(ctx, "{ll}:lock", "p:proc", "1", "woken", "p:proc", "wokenUntil", "1").Err(); err != nil {
			t.Fatal(err)
		}
		wantReply(t, evalSHA(t, ctx, rdb, leaveLineScript, []string{"{ll}:lock"}, "{ll}:released", "proc"), int64(0))
		// The lock was free and its last process left: nothing remains.
		wantExists(t, ctx, rdb, "{ll}:lock", false)
	}},
	{"fair_acquire.lua", fairAcquireScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		keys := []string{"{fair}:lock", "{fair}:fence", "{fair}:tomb", "{fair}:queue", "{fair}:queue:ends"}
		args := func(owner, token string) []any {
			return []any{owner, token, 10000, 0, 0, 5000, "{fair}:released", 0, 1, ""}
		}
		wantTaken(t, evalSHA(t, ctx, rdb, fairAcquireScript, keys, args("a", "tok-a")...))
		refused := evalSHA(t, ctx, rdb, fairAcquireScript, keys, args("b", "tok-b")...).([]any)
		if refused[0] != int64(0) {
			t.Errorf("second owner: %v, want a refusal", refused)
		}
		if rank := rdb.ZRank(ctx, "{fair}:queue", "tok-b"); rank.Err() != nil || rank.Val() != 0 {
			t.Errorf("the refused waiter's place: %v", rank)
		}
	}},
	{"acquire_tick.lua", acquireTickScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		keys := []string{"{tick}:lock", "{tick}:fence", "{tick}:tomb", "{tick}:tick"}
		wantTaken(t, evalSHA(t, ctx, rdb, acquireTickScript, keys, "t1", 60000, "owner", "tok", 10000, 0, 0))
		wantReply(t, evalSHA(t, ctx, rdb, acquireTickScript, keys, "t1", 60000, "other", "tok2", 10000, 0, 0),
			[]any{int64(2), "t1", "tok"})
	}},
	{"undo_tick_claim.lua", undoTickClaimScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		if err := rdb.HSet(ctx, "{undo}:tick", "tick", "t2", "token", "tok", "ptick", "t1", "ptoken", "old").Err(); err != nil {
			t.Fatal(err)
		}
		wantReply(t, evalSHA(t, ctx, rdb, undoTickClaimScript, []string{"{undo}:tick"}, "other"), int64(0))
		wantReply(t, evalSHA(t, ctx, rdb, undoTickClaimScript, []string{"{undo}:tick"}, "tok"), int64(1))
		if got := rdb.HGetAll(ctx, "{undo}:tick").Val(); !reflect.DeepEqual(got, map[string]string{"tick": "t1", "token": "old"}) {
			t.Errorf("record after the undo: %v", got)
		}
	}},
	{"raise_fence.lua", raiseFenceScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		wantReply(t, evalSHA(t, ctx, rdb, raiseFenceScript, []string{"{raise}:lock", "{raise}:fence"}, 12345, "tok", 0), int64(0))
		if got := rdb.Get(ctx, "{raise}:fence").Val(); got != "12345" {
			t.Errorf("fence counter %q, want 12345", got)
		}
	}},
	{"holds_release.lua", holdsReleaseScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		wantHoldTaken(t, eval(t, ctx, rdb, semAcquireScript, []string{"{hr}:sem", "{hr}:sem:info", "{hr}:sem:fence", "{hr}:sem:tomb"}, "tok", 10000, 0, 0, 1))
		keys := []string{"{hr}:sem", "{hr}:sem:info", "{hr}:sem:tomb", "{hr}:sem:w", "{hr}:sem:r", "{hr}:sem:a"}
		wantReply(t, evalSHA(t, ctx, rdb, holdsReleaseScript, keys, "tok", "{hr}:released", 0, 0), int64(0))
		wantReply(t, evalSHA(t, ctx, rdb, holdsReleaseScript, keys, "tok", "{hr}:released", 0, 0), int64(-1))
	}},
	{"holds_renew.lua", holdsRenewScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		keys := []string{"{hn}:sem", "{hn}:sem:info", "{hn}:sem:w", "{hn}:sem:r", "{hn}:sem:a"}
		wantReply(t, evalSHA(t, ctx, rdb, holdsRenewScript, keys, "tok", 10000), int64(0))
		wantHoldTaken(t, eval(t, ctx, rdb, semAcquireScript, []string{"{hn}:sem", "{hn}:sem:info", "{hn}:sem:fence", "{hn}:sem:tomb"}, "tok", 1000, 0, 0, 1))
		wantReply(t, evalSHA(t, ctx, rdb, holdsRenewScript, keys, "tok", 10000), int64(1))
	}},
	{"holds_ttl.lua", holdsTTLScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		wantReply(t, evalSHA(t, ctx, rdb, holdsTTLScript, []string{"{ht}:sem"}, "tok"), int64(-2))
	}},
	{"rw_acquire.lua", rwAcquireScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		keys := []string{"{rw}:rw", "{rw}:rw:info", "{rw}:rw:fence", "{rw}:rw:tomb", "{rw}:rw:w", "{rw}:rw:r", "{rw}:rw:a"}
		wantHoldTaken(t, evalSHA(t, ctx, rdb, rwAcquireScript, keys, "writer", 10000, 0, 0, "1", 0))
		refused := evalSHA(t, ctx, rdb, rwAcquireScript, keys, "reader", 10000, 0, 0, "0", 5000).([]any)
		if refused[0] != int64(0) {
			t.Errorf("a reader while the writer holds: %v, want a refusal", refused)
		}
	}},
	{"sem_acquire.lua", semAcquireScript, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		keys := []string{"{sem}:sem", "{sem}:sem:info", "{sem}:sem:fence", "{sem}:sem:tomb"}
		wantHoldTaken(t, evalSHA(t, ctx, rdb, semAcquireScript, keys, "a", 10000, 0, 0, 2))
		wantHoldTaken(t, evalSHA(t, ctx, rdb, semAcquireScript, keys, "b", 10000, 0, 0, 2))
		refused := evalSHA(t, ctx, rdb, semAcquireScript, keys, "c", 10000, 0, 0, 2).([]any)
		if refused[0] != int64(0) {
			t.Errorf("a third permit of two: %v, want a refusal", refused)
		}
	}},
}

// TestLuaScripts loads each script into a real server (it compiles, and
// the server's SHA1 is the one EVALSHA sends) and runs its smoke test.
func TestLuaScripts(t *testing.T) {
	if len(luaCases) != scriptCount {
		t.Fatalf("%d scripts tested, %d made by newScript: add the new ones to luaCases", len(luaCases), scriptCount)
	}
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	for _, c := range luaCases {
		t.Run(c.file, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if c.s.src != luaScript(c.file) {
				t.Fatalf("the script is not built from lua/%s", c.file)
			}
			sha, err := rdb.ScriptLoad(ctx, c.s.src).Result()
			if err != nil {
				t.Fatalf("SCRIPT LOAD: %v", err)
			}
			if sha != c.s.shaArg {
				t.Fatalf("server's SHA1 %s, the Backend sends %s", sha, c.s.shaArg)
			}
			c.smoke(t, ctx, rdb)
		})
	}
}

// TestLuaFiles checks that the scripts are built whole: every file of lua/
// is a script or included by one, and no include line or constant name is
// left in a script's text.
func TestLuaFiles(t *testing.T) {
	reached := map[string]bool{}
	var walk func(name string)
	walk = func(name string) {
		reached[name] = true
		src, err := luaFiles.ReadFile("lua/" + name)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(src)) {
			if inc, ok := strings.CutPrefix(strings.TrimSpace(line), includeDirective); ok {
				walk(strings.TrimSpace(inc))
			}
		}
	}
	for _, c := range luaCases {
		walk(c.file)
		for _, left := range []string{"--#", "TURN_HOLDS_MAX", "TURN_KEEP_MS"} {
			if strings.Contains(c.s.src, left) {
				t.Errorf("lua/%s: the script's text still has %q", c.file, left)
			}
		}
	}
	files, err := fs.Glob(luaFiles, "lua/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if name := strings.TrimPrefix(f, "lua/"); !reached[name] {
			t.Errorf("lua/%s is neither a script nor included by one", name)
		}
	}
	if len(files) == 0 || !slices.Contains(files, "lua/take.lua") {
		t.Errorf("lua/ files embedded: %v", files)
	}
}

// evalSHA runs s with EVALSHA: the script the test loaded.
func evalSHA(t *testing.T, ctx context.Context, rdb *redis.Client, s script, keys []string, args ...any) any {
	t.Helper()
	reply, err := rdb.EvalSha(ctx, s.shaArg.(string), keys, args...).Result()
	if err != nil {
		t.Fatalf("EVALSHA %v %v: %v", keys, args, err)
	}
	return reply
}

// eval runs s with EVAL: a script a smoke test needs besides its own.
func eval(t *testing.T, ctx context.Context, rdb *redis.Client, s script, keys []string, args ...any) any {
	t.Helper()
	reply, err := rdb.Eval(ctx, s.src, keys, args...).Result()
	if err != nil {
		t.Fatalf("EVAL %v %v: %v", keys, args, err)
	}
	return reply
}

func wantReply(t *testing.T, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("reply %#v, want %#v", got, want)
	}
}

// wantTaken checks an acquire script's reply {1, fence, holds}.
// wantTaken checks the reply of a lock's acquire script that took a free
// lock: the new fence alone.
func wantTaken(t *testing.T, reply any) {
	t.Helper()
	if fence, ok := reply.(int64); !ok || fence <= 0 {
		t.Fatalf("reply %#v, want a positive fence", reply)
	}
}

// wantHoldTaken checks the reply of a semaphore's or read-write lock's
// acquire script that took a hold: {1, fence, 1}.
func wantHoldTaken(t *testing.T, reply any) {
	t.Helper()
	r, ok := reply.([]any)
	if !ok || len(r) != 3 || r[0] != int64(1) || r[1].(int64) <= 0 || r[2] != int64(1) {
		t.Fatalf("reply %#v, want {1, fence, 1}", reply)
	}
}

func wantExists(t *testing.T, ctx context.Context, rdb *redis.Client, key string, want bool) {
	t.Helper()
	if n := rdb.Exists(ctx, key).Val(); (n == 1) != want {
		t.Errorf("key %s exists: %v, want %v", key, n == 1, want)
	}
}

// TestAcquireReply: the acquire scripts' replies decode to the same
// results whether they are the bare fence of a free lock taken or a table.
func TestAcquireReply(t *testing.T) {
	cases := []struct {
		name  string
		reply Reply
		want  driver.Result
		err   bool
	}{
		{"free lock taken", Reply{Value: int64(42)}, driver.Result{Acquired: true, Fence: 42, Holds: 1}, false},
		{"re-entered", Reply{Value: []any{int64(1), int64(42), int64(2)}}, driver.Result{Acquired: true, Fence: 42, Holds: 2}, false},
		{"held by another", Reply{Value: []any{int64(0), int64(0), int64(0), int64(1500)}}, driver.Result{HolderTTL: 1500 * time.Millisecond}, false},
		{"fence not positive", Reply{Value: int64(0)}, driver.Result{}, true},
		{"not an integer", Reply{Value: "42"}, driver.Result{}, true},
		{"error", Reply{Err: errors.New("boom")}, driver.Result{}, true},
	}
	for _, c := range cases {
		got, err := acquireReply(c.reply)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("%s: acquireReply(%v) = %+v, %v; want %+v, error %v", c.name, c.reply.Value, got, err, c.want, c.err)
		}
		tick, err := tickResult(c.reply)
		if (err != nil) != c.err || tick.Result != c.want || tick.Claimed {
			t.Errorf("%s: tickResult(%v) = %+v, %v; want %+v, error %v", c.name, c.reply.Value, tick, err, c.want, c.err)
		}
	}
	claimed, err := tickResult(Reply{Value: []any{int64(2), "t1", "tok"}})
	if err != nil || !claimed.Claimed || claimed.LastTick != "t1" || claimed.LastToken != "tok" {
		t.Errorf("tickResult of a claimed tick = %+v, %v", claimed, err)
	}
}
