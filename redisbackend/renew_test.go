package redisbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/servertest"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// On a single node a renewal batch is one script run, whatever its size
// (issue 9: a script call per lock cost Redis about as much as the lock's
// own commands), and each lock still gets its own result: renewed, not
// held, or an error of its own when its key holds another type.
func TestRenewBatchOneScript(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	b := redisbackend.New(rdb)
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	const ttl = time.Minute
	ref := func(key, token string) fencelock.LockRef {
		return fencelock.LockRef{Namespace: "rn", Key: key, Token: token}
	}
	const n = 40
	var reqs []fencelock.RenewRequest
	for i := range n {
		r := ref("held-"+string(rune('A'+i)), "tok")
		if res, err := b.Acquire(ctx, fencelock.AcquireRequest{LockRef: r, Owner: "tok", TTL: 5 * time.Second}); err != nil || !res.Acquired {
			t.Fatalf("Acquire: %+v %v", res, err)
		}
		reqs = append(reqs, fencelock.RenewRequest{LockRef: r, TTL: ttl})
	}
	if err := rdb.Set(ctx, "rn:{wrongtype}:lock", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	reqs = append(reqs,
		fencelock.RenewRequest{LockRef: ref("never-held", "tok"), TTL: ttl},
		fencelock.RenewRequest{LockRef: ref("wrongtype", "tok"), TTL: ttl})
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := b.Renew(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	calls := commandCalls(t, rdb)
	if calls["evalsha"]+calls["eval"] != 1 || calls["time"] != 1 {
		t.Fatalf("commands of a batch of %d renewals: %s; want one script run reading the clock once", len(reqs), fmtCalls(calls))
	}
	for i := range n {
		if !res[i].Held || res[i].Err != nil {
			t.Fatalf("renewal %d of a held lock: %+v, want held", i, res[i])
		}
		if pttl := rdb.PTTL(ctx, "rn:{"+reqs[i].Key+"}:lock").Val(); pttl < ttl/2 {
			t.Fatalf("lock %d's key expires in %v after the renewal, want about %v", i, pttl, ttl)
		}
	}
	if r := res[n]; r.Held || r.Err != nil {
		t.Fatalf("renewal of a lock never held: %+v, want not held, no error", r)
	}
	if r := res[n+1]; r.Err == nil {
		t.Fatalf("renewal of a key holding a string: %+v, want an error of its own", r)
	} else {
		t.Logf("the wrong-type key's error: %v", r.Err)
	}
}
