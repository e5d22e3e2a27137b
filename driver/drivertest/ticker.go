package drivertest

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// The checks of driver.Ticker (the record of a job's last claimed tick,
// Client.RunJob).
func init() {
	tk := has[driver.Ticker]
	checks = append(checks, []check{
		{"TickClaimedWithTheLock", tickClaimedWithTheLock, tk},
		{"TickOlderThanClaimedRefused", tickOlderThanClaimedRefused, tk},
		{"TickRetryIsIdempotent", tickRetryIsIdempotent, tk},
		{"TickRetryAfterHoldLapsed", tickRetryAfterHoldLapsed, tk},
		{"TickWaitsForEarlierRun", tickWaitsForEarlierRun, tk},
		{"TickRefusedByHolderWritesNothing", tickRefusedByHolderWritesNothing, tk},
		{"TickTombstoneRefused", tickTombstoneRefused, tk},
		{"TickFencesIncrease", tickFencesIncrease, tk},
		{"TickRecordLapses", tickRecordLapses, tk},
		{"TickOfOtherKindsRefused", tickOfOtherKindsRefused, tk},
	}...)
}

// Ticks are recorded with the plain lock: a request of another kind
// answers ErrUnsupported.
func tickOfOtherKindsRefused(ctx context.Context, s *suite) {
	for _, k := range kinds[1:] {
		u := s.as(k)
		_, err := capability[driver.Ticker](s).AcquireTick(ctx, driver.TickRequest{
			Request: u.request("job", "a", 10*time.Second), Tick: "t1", RecordLife: tickRecordLife})
		u.unsupported("AcquireTick of a "+k.String(), err)
	}
}

// tickRecordLife is the record life of the checks that do not wait for it.
const tickRecordLife = time.Minute

// acquireTick makes one AcquireTick attempt of token (its own owner) for
// tick, with lease ttl and the record life tickRecordLife.
func (s *suite) acquireTick(ctx context.Context, key, token, tick string, ttl time.Duration) driver.TickResult {
	s.t.Helper()
	return s.acquireTickReq(ctx, driver.TickRequest{
		Request: driver.Request{Ref: s.ref(key, token), Owner: token, TTL: ttl},
		Tick:    tick, RecordLife: tickRecordLife,
	})
}

func (s *suite) acquireTickReq(ctx context.Context, req driver.TickRequest) driver.TickResult {
	s.t.Helper()
	res, err := capability[driver.Ticker](s).AcquireTick(ctx, req)
	if err != nil {
		s.t.Fatalf("AcquireTick(%s, token %s, tick %s): %v", req.Key, req.Token, req.Tick, err)
	}
	return res
}

// claimed fails the check unless res says the tick was claimed by token
// with tick last.
func (s *suite) claimed(res driver.TickResult, what, last, token string) {
	s.t.Helper()
	if !res.Claimed || res.Acquired || res.Fence != 0 || res.LastTick != last || res.LastToken != token {
		s.t.Fatalf("%s: %+v, want refused as claimed, the record naming tick %s of token %s", what, res, last, token)
	}
}

// A free lock is taken with the tick: the acquisition is Acquire's (a
// fence, one hold, the lease), and the tick is claimed. Once the hold is
// released, another token's attempt for the tick is refused as claimed
// and takes nothing, while a plain acquire of the lock is not hindered.
func tickClaimedWithTheLock(ctx context.Context, s *suite) {
	res := s.acquireTick(ctx, "job", "a", "t2", 10*time.Second)
	if !res.Acquired || res.Claimed || res.Fence <= 0 || res.Holds != 1 {
		s.t.Fatalf("a tick of a free lock: %+v, want acquired with a fence and one hold, not claimed", res)
	}
	if ttl := s.ttlOf(ctx, "job", "a"); ttl <= 0 || ttl > 10*time.Second {
		s.t.Fatalf("TTL of the run's 10s lease: %v", ttl)
	}
	s.claimed(s.acquireTick(ctx, "job", "b", "t2", 10*time.Second), "the same tick while its run holds the lock", "t2", "a")
	s.release(ctx, "job", "a")
	s.claimed(s.acquireTick(ctx, "job", "b", "t2", 10*time.Second), "the same tick after its run released the lock", "t2", "a")
	s.notHeld(ctx, "job", "b", "the refused token (it took nothing)")
	plain := s.acquire(ctx, "job", "c", "", time.Second)
	if !plain.Acquired || plain.Fence <= res.Fence {
		s.t.Fatalf("a plain acquire of the free lock: %+v, want acquired with a fence above %d", plain, res.Fence)
	}
}

// A tick older than the one claimed is refused as claimed, naming the
// later tick, even for the token of the claim; a later one is taken.
func tickOlderThanClaimedRefused(ctx context.Context, s *suite) {
	if res := s.acquireTick(ctx, "job", "a", "t5", 10*time.Second); !res.Acquired {
		s.t.Fatalf("tick t5 of a free lock: %+v, want acquired", res)
	}
	s.release(ctx, "job", "a")
	s.claimed(s.acquireTick(ctx, "job", "b", "t3", 10*time.Second), "an older tick", "t5", "a")
	// Only the claim itself (its tick by its token) is a retry.
	s.claimed(s.acquireTick(ctx, "job", "a", "t3", 10*time.Second), "an older tick by the token of the claim", "t5", "a")
	// Byte order: "t10" is before "t5".
	s.claimed(s.acquireTick(ctx, "job", "b", "t10", 10*time.Second), "a tick before in byte order", "t5", "a")
	if res := s.acquireTick(ctx, "job", "c", "t7", 10*time.Second); !res.Acquired {
		s.t.Fatalf("a later tick, t7: %+v, want acquired", res)
	}
	s.claimed(s.acquireTick(ctx, "job", "d", "t6", 10*time.Second), "a tick older than the new claim", "t7", "c")
}

// An attempt of a token that holds the lock for its tick is a retry (its
// reply was lost): acquired, with the same fence and one hold, not claimed.
func tickRetryIsIdempotent(ctx context.Context, s *suite) {
	first := s.acquireTick(ctx, "job", "a", "t1", 10*time.Second)
	again := s.acquireTick(ctx, "job", "a", "t1", 10*time.Second)
	if !again.Acquired || again.Claimed || again.Fence != first.Fence || again.Holds != 1 {
		s.t.Fatalf("a retried tick acquire: %+v, want acquired with fence %d and one hold", again, first.Fence)
	}
	if rel := s.release(ctx, "job", "a"); !rel.Held || rel.Remaining != 0 {
		s.t.Fatalf("release after the retry: %+v, want held and 0 remaining", rel)
	}
}

// A token whose claim's hold lapsed before it learnt of it (the reply was
// lost) may take the lock again for its tick: no run began under its claim.
// Another token may not.
func tickRetryAfterHoldLapsed(ctx context.Context, s *suite) {
	first := s.acquireTick(ctx, "job", "a", "t1", 500*time.Millisecond)
	if !first.Acquired {
		s.t.Fatalf("tick of a free lock: %+v", first)
	}
	s.waitLapsed(ctx, "job", "a", 15*time.Second)
	s.claimed(s.acquireTick(ctx, "job", "b", "t1", 10*time.Second), "another token, after the claim's hold lapsed", "t1", "a")
	again := s.acquireTick(ctx, "job", "a", "t1", 10*time.Second)
	if !again.Acquired || again.Fence <= first.Fence {
		s.t.Fatalf("the claiming token again, after its hold lapsed: %+v, want acquired with a fence above %d", again, first.Fence)
	}
}

// A later tick's attempt while an earlier tick's run holds the lock is
// refused with the holder's lease, not as claimed, and marks the lock as
// waited for: its release notifies (with a Notifier). The record
// still names the earlier tick; after the release the later tick is taken
// with a larger fence.
func tickWaitsForEarlierRun(ctx context.Context, s *suite) {
	first := s.acquireTick(ctx, "job", "a", "t1", 10*time.Second)
	var w *driver.Watch
	if has[driver.Notifier](s.st) {
		w = s.watch(ctx, "job")
	}
	res := s.acquireTick(ctx, "job", "b", "t2", 10*time.Second)
	if res.Acquired || res.Claimed || res.HolderTTL <= 0 || res.HolderTTL > 10*time.Second {
		s.t.Fatalf("a later tick while the earlier run holds the lock: %+v, want refused (not claimed) with the holder's lease", res)
	}
	s.claimed(s.acquireTick(ctx, "job", "c", "t1", 10*time.Second), "the earlier tick, after the refusal", "t1", "a")
	s.release(ctx, "job", "a")
	if w != nil {
		s.awaitNotification(w, "the release of a run after a later tick's attempt was refused")
	}
	next := s.acquireTick(ctx, "job", "b", "t2", 10*time.Second)
	if !next.Acquired || next.Fence <= first.Fence {
		s.t.Fatalf("the later tick after the release: %+v, want acquired with a fence above %d", next, first.Fence)
	}
}

// An attempt refused because another owner holds the lock (a plain hold)
// claims nothing: once the lock is free, another token takes that tick.
func tickRefusedByHolderWritesNothing(ctx context.Context, s *suite) {
	s.acquire(ctx, "job", "x", "", 10*time.Second)
	if res := s.acquireTick(ctx, "job", "b", "t1", 10*time.Second); res.Acquired || res.Claimed {
		s.t.Fatalf("a tick while another owner holds the lock: %+v, want refused, not claimed", res)
	}
	s.release(ctx, "job", "x")
	if res := s.acquireTick(ctx, "job", "c", "t1", 10*time.Second); !res.Acquired {
		s.t.Fatalf("the tick once the lock is free: %+v, want acquired (the refused attempt claimed nothing)", res)
	}
}

// A token with a tombstone is refused, claiming nothing.
func tickTombstoneRefused(ctx context.Context, s *suite) {
	s.releaseTombstone(ctx, "job", "a", time.Minute)
	if res := s.acquireTick(ctx, "job", "a", "t1", 10*time.Second); res.Acquired || res.Claimed {
		s.t.Fatalf("a tombstoned token: %+v, want refused, not claimed", res)
	}
	s.notHeld(ctx, "job", "a", "the tombstoned token")
	if res := s.acquireTick(ctx, "job", "b", "t1", 10*time.Second); !res.Acquired {
		s.t.Fatalf("another token for the tick: %+v, want acquired (the refused attempt claimed nothing)", res)
	}
}

// Fences of tick acquisitions are minted as Acquire's: strictly increasing
// across plain and tick acquisitions of the lock, and above FenceFloor.
func tickFencesIncrease(ctx context.Context, s *suite) {
	var last int64
	for i := range 10 {
		token := fmt.Sprint("t", i)
		var fence int64
		if i%2 == 0 {
			res := s.acquireTick(ctx, "job", token, fmt.Sprintf("tick%02d", i), time.Second)
			if !res.Acquired {
				s.t.Fatalf("tick acquisition %d: %+v, want acquired", i, res)
			}
			fence = res.Fence
		} else {
			fence = s.acquire(ctx, "job", token, "", time.Second).Fence
		}
		if fence <= last {
			s.t.Fatalf("acquisition %d: fence %d, want above %d", i, fence, last)
		}
		last = fence
		s.release(ctx, "job", token)
	}
	floor := last + 1_000_000
	res := s.acquireTickReq(ctx, driver.TickRequest{
		Request: driver.Request{Ref: s.ref("job", "f"), Owner: "f", TTL: time.Second, FenceFloor: floor},
		Tick:    "tick99", RecordLife: tickRecordLife,
	})
	if !res.Acquired || res.Fence <= floor {
		s.t.Fatalf("a tick acquisition with fence floor %d: %+v, want a fence above it", floor, res)
	}
}

// The record lasts its life, then lapses: the tick can be claimed again.
func tickRecordLapses(ctx context.Context, s *suite) {
	const life = 300 * time.Millisecond // stores may round it up (etcd: whole seconds, and a minimum)
	req := driver.TickRequest{
		Request: driver.Request{Ref: s.ref("job", "a"), Owner: "a", TTL: 10 * time.Second},
		Tick:    "t1", RecordLife: life,
	}
	claimedAt := time.Now()
	if res := s.acquireTickReq(ctx, req); !res.Acquired {
		s.t.Fatalf("tick of a free lock: %+v", res)
	}
	s.release(ctx, "job", "a")
	for i := 0; ; i++ {
		token := fmt.Sprint("late", i)
		res := s.acquireTick(ctx, "job", token, "t1", 10*time.Second)
		if res.Acquired {
			if since := time.Since(claimedAt); since < life {
				s.t.Fatalf("the tick was claimed again %v after the claim, before the record's life (%v)", since, life)
			}
			return
		}
		if !res.Claimed {
			s.t.Fatalf("the tick while the lock is free: %+v, want acquired or claimed", res)
		}
		if time.Since(claimedAt) > 15*time.Second {
			s.t.Fatalf("the record of a claim with a life of %v still refuses the tick after 15s", life)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
