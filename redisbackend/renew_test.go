package redisbackend_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// On a single node a renewal batch is one script run, whatever its size (a
// script call per lock would cost Redis about as much as the lock's own
// commands), and each lock still gets its own result: renewed, not
// held, or an error of its own when its key holds another type.
func TestRenewBatchOneScript(t *testing.T) {
	b, rdb := newBackend(t)
	ctx := context.Background()
	const ttl = time.Minute
	ref := func(key, token string) driver.Ref {
		return driver.Ref{Namespace: "rn", Key: key, Token: token}
	}
	const n = 40
	var reqs []driver.RenewRequest
	for i := range n {
		r := ref("held-"+string(rune('A'+i)), "tok")
		if res, err := b.Acquire(ctx, driver.Request{Ref: r, Owner: "tok", TTL: 5 * time.Second}); err != nil || !res.Acquired {
			t.Fatalf("Acquire: %+v %v", res, err)
		}
		reqs = append(reqs, driver.RenewRequest{Ref: r, TTL: ttl})
	}
	if err := rdb.Set(ctx, "rn:{wrongtype}:lock", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	reqs = append(reqs,
		driver.RenewRequest{Ref: ref("never-held", "tok"), TTL: ttl},
		driver.RenewRequest{Ref: ref("wrongtype", "tok"), TTL: ttl})
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
	// Extending a lone hold reads its own field, not the whole hash.
	if calls["hgetall"] != 0 || calls["hget"] != len(reqs) {
		t.Fatalf("commands of a batch of %d renewals: %s; want an HGET a lock and no HGETALL", len(reqs), fmtCalls(calls))
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

// A renewal keeps the lock key's expiry at the end of its latest hold, in a
// batch (one script for all) and alone (Refresh, Cluster): it extends the
// expiry when the renewed hold becomes the latest, leaves it when another
// hold ends later, and brings it back when a shorter ttl ends the renewed
// hold sooner (the release script relies on it: a key that exists has a
// running lease for a lone hold).
func TestRenewKeepsKeyExpiryAtLatestHold(t *testing.T) {
	b, rdb := newBackend(t)
	ctx := context.Background()
	ref := func(key, token string) driver.Ref {
		return driver.Ref{Namespace: "rx", Key: key, Token: token}
	}
	take := func(r driver.Ref, ttl time.Duration) {
		t.Helper()
		if res, err := b.Acquire(ctx, driver.Request{Ref: r, Owner: "o", TTL: ttl}); err != nil || !res.Acquired {
			t.Fatalf("Acquire %v: %+v %v", r, res, err)
		}
	}
	// The other lock of every batch, so that a batch has two and runs as one script.
	other := ref("other", "x")
	take(other, time.Hour)
	for _, batch := range []bool{true, false} {
		renew := func(r driver.Ref, ttl time.Duration) {
			t.Helper()
			reqs := []driver.RenewRequest{{Ref: r, TTL: ttl}}
			if batch {
				reqs = append(reqs, driver.RenewRequest{Ref: other, TTL: time.Hour})
			}
			res, err := b.Renew(ctx, reqs)
			if err != nil || !res[0].Held {
				t.Fatalf("batch %v: Renew %v ttl %v: %+v %v", batch, r, ttl, res, err)
			}
		}
		expiry := func(key string, want time.Duration, what string) {
			t.Helper()
			// The script's clock and PTTL's are the server's; a second of
			// slack covers a slow machine, far below the ttls' differences.
			if got := rdb.PTTL(ctx, "rx:{"+key+"}:lock").Val(); got > want || got < want-time.Second {
				t.Errorf("batch %v: %s: the key expires in %v, want %v", batch, what, got, want)
			}
		}
		key := fmt.Sprintf("lone-%v", batch)
		take(ref(key, "a"), 5*time.Second)
		renew(ref(key, "a"), 20*time.Second)
		expiry(key, 20*time.Second, "a lone hold extended")
		renew(ref(key, "a"), 2*time.Second)
		expiry(key, 2*time.Second, "a lone hold renewed with a shorter ttl")

		key = fmt.Sprintf("reentered-%v", batch)
		take(ref(key, "a"), 30*time.Second)
		take(ref(key, "b"), 5*time.Second) // the same owner: a second hold
		renew(ref(key, "b"), 10*time.Second)
		expiry(key, 30*time.Second, "the shorter of two holds extended")
		renew(ref(key, "b"), time.Minute)
		expiry(key, time.Minute, "the shorter hold extended past the other")
		renew(ref(key, "b"), time.Second)
		expiry(key, 30*time.Second, "the latest hold renewed with a shorter ttl")
	}
}

// roundTrips counts what a go-redis client sends: single commands and
// pipelines (one round trip each).
type roundTrips struct{ commands, pipelines atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.commands.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.pipelines.Add(1)
		return next(ctx, cmds)
	}
}

// A renewal batch that mixes a lock, a permit and a write hold goes out as
// one pipeline, each hold renewed by its kind's script.
func TestRenewMixedBatchOnePipeline(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	b := redisbackend.New(rdb)
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	var reqs []driver.RenewRequest
	for _, k := range []driver.Kind{driver.KindLock, driver.KindSemaphore, driver.KindWrite} {
		ref := driver.Ref{Kind: k, Namespace: "mix", Key: "k", Token: "tok-" + k.String()}
		res, err := b.Acquire(ctx, driver.Request{Ref: ref, Owner: ref.Token, TTL: 5 * time.Second, Permits: 1})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire of the %v: %+v %v", k, res, err)
		}
		reqs = append(reqs, driver.RenewRequest{Ref: ref, TTL: time.Minute})
	}
	if _, err := b.Renew(ctx, reqs); err != nil { // loads the scripts
		t.Fatal(err)
	}
	var trips roundTrips
	rdb.AddHook(&trips)
	res, err := b.Renew(ctx, reqs)
	if err != nil || len(res) != len(reqs) {
		t.Fatalf("Renew: %+v %v", res, err)
	}
	for i, r := range res {
		if !r.Held || r.Err != nil {
			t.Errorf("renewal of the %v: %+v, want held", reqs[i].Kind, r)
		}
	}
	if c, p := trips.commands.Load(), trips.pipelines.Load(); c != 0 || p != 1 {
		t.Errorf("a mixed renewal batch took %d commands and %d pipelines, want one pipeline", c, p)
	}
}
