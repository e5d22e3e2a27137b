package redisbackend

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// Redis forgets its scripts on SCRIPT FLUSH, and so does a restarted server
// or a replica promoted without having run them, while the Backend still
// believes them loaded and sends EVALSHA. Each way of sending a script must
// then get NOSCRIPT, send EVAL instead, and return the script's own reply:
// alone (scriptCache.run), in a pipeline shared by concurrent calls
// (coalescer.exec) and in a batch (scriptCache.runBatch).
func TestScriptsRunAfterTheServerForgetsThem(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var cache scriptCache
	tr := &goRedis{rdb: rdb}
	pipe := coalescer{tr: tr, scripts: &cache, maxFlushers: 1}
	ttlOf := func(n int) (keys []string, args []any) {
		return []string{fmt.Sprintf("{k%d}:lock", n)}, []any{"token"}
	}
	// ttlScript replies -2 for a lock that does not exist: a reply only the
	// script itself gives.
	check := func(how string, r Reply) {
		t.Helper()
		if v, err := r.int64(); err != nil || v != -2 {
			t.Errorf("%s: reply %d, %v; want the script's -2", how, v, err)
		}
	}
	keys, args := ttlOf(0)
	check("first run (EVAL)", cache.run(ctx, tr, ttlScript, keys, args...))
	if !cache.sent[ttlScript.id].Load() {
		t.Fatal("the script is not marked as loaded after its first run")
	}

	forget := func() {
		t.Helper()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	forget()
	check("alone, after SCRIPT FLUSH", cache.run(ctx, tr, ttlScript, keys, args...))

	forget()
	var batch []*pendingCall
	for n := range 3 {
		keys, args := ttlOf(n)
		batch = append(batch, &pendingCall{ctx: ctx, s: ttlScript, keys: keys, args: args})
	}
	pipe.exec(batch)
	for n, p := range batch {
		check(fmt.Sprintf("call %d of a shared pipeline, after SCRIPT FLUSH", n), p.reply)
	}

	forget()
	var calls []call
	for n := range 3 {
		keys, args := ttlOf(n)
		calls = append(calls, call{s: ttlScript, keys: keys, args: args})
	}
	for n, cmd := range cache.runBatch(ctx, tr, calls) {
		check(fmt.Sprintf("call %d of a batch, after SCRIPT FLUSH", n), cmd)
	}
}
