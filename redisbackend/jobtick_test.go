package redisbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
)

// tickReq is an attempt of token for tick on the lock key.
func tickReq(key, token, tick string) driver.TickRequest {
	return driver.TickRequest{Request: acquireReq(key, token, token, 10*time.Second), Tick: tick, RecordLife: time.Minute}
}

// The record is one hash beside the lock, in its hash slot, with the
// claim, the claim it replaced, and the record's life as its expiry.
func TestTickRecordLayout(t *testing.T) {
	b, rdb := newBackend(t)
	ctx := context.Background()
	for _, tc := range []struct{ token, tick string }{{"a", "t1"}, {"b", "t2"}} {
		if res, err := b.AcquireTick(ctx, tickReq("job:j", tc.token, tc.tick)); err != nil || !res.Acquired {
			t.Fatalf("claim of %s: %+v, %v", tc.tick, res, err)
		}
		if _, err := b.Release(ctx, driver.ReleaseRequest{Ref: tickReq("job:j", tc.token, tc.tick).Ref}); err != nil {
			t.Fatal(err)
		}
	}
	got := rdb.HGetAll(ctx, "t:{job:j}:tick").Val()
	if got["tick"] != "t2" || got["token"] != "b" || got["ptick"] != "t1" || got["ptoken"] != "a" {
		t.Errorf("record %v, want tick t2 by b, replacing t1 by a", got)
	}
	if ttl := rdb.PTTL(ctx, "t:{job:j}:tick").Val(); ttl <= 50*time.Second || ttl > time.Minute {
		t.Errorf("record expiry %v, want about the record life (1m)", ttl)
	}
	if undone, err := b.UndoTickClaim(ctx, "t", "job:j", "a"); err != nil || undone {
		t.Errorf("undo by a token whose claim was replaced: %v, %v; want nothing done", undone, err)
	}
	if undone, err := b.UndoTickClaim(ctx, "t", "job:j", "b"); err != nil || !undone {
		t.Errorf("undo of the current claim: %v, %v", undone, err)
	}
	if got := rdb.HGetAll(ctx, "t:{job:j}:tick").Val(); got["tick"] != "t1" || got["token"] != "a" || len(got) != 2 {
		t.Errorf("record after the undo %v, want the claim it replaced (t1 by a) alone", got)
	}
	if undone, err := b.UndoTickClaim(ctx, "t", "job:j", "a"); err != nil || !undone {
		t.Errorf("undo of the first claim: %v, %v", undone, err)
	}
	if n := rdb.Exists(ctx, "t:{job:j}:tick").Val(); n != 0 {
		t.Error("the record of no claim is still there")
	}
}

// With WithReplicaAck, a claim no replica acknowledged is released and
// undone: the tick is not left claimed by a run that never began, and the
// claim it replaced is back.
func TestReplicaAckTickUndone(t *testing.T) {
	rdb, replica := masterWithReplica(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := redisbackend.New(rdb, redisbackend.WithReplicaAck(1, 300*time.Millisecond))
	t.Cleanup(func() { replica.Resume(); b.Close() })

	if res, err := b.AcquireTick(ctx, tickReq("job:j", "a", "t1")); err != nil || !res.Acquired {
		t.Fatalf("claim of t1 with a live replica: %+v, %v", res, err)
	}
	if _, err := b.Release(ctx, driver.ReleaseRequest{Ref: tickReq("job:j", "a", "t1").Ref}); err != nil {
		t.Fatal(err)
	}
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	_, err := b.AcquireTick(ctx, tickReq("job:j", "b", "t2"))
	if !errors.Is(err, fencelock.ErrNotReplicated) {
		t.Fatalf("claim of t2 with the replica paused: %v, want ErrNotReplicated", err)
	}
	if n := rdb.Exists(ctx, "t:{job:j}:lock").Val(); n != 0 {
		t.Error("a claim no replica acknowledged left its hold on the master")
	}
	if got := rdb.HGetAll(ctx, "t:{job:j}:tick").Val(); got["tick"] != "t1" || got["token"] != "a" {
		t.Errorf("record after the unacknowledged claim: %v, want t1 by a back", got)
	}
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 20*time.Second, "t2 claimed by another token once the replica is back", func() bool {
		res, err := b.AcquireTick(ctx, tickReq("job:j", "c", "t2"))
		return err == nil && res.Acquired
	})
}
