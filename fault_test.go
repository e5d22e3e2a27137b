package fencelock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

// slowReplies wraps the real Redis backend and holds back replies after the
// server has applied the request: a slow network that a real server cannot
// produce on demand. Everything else goes to the server as is.
type slowReplies struct {
	*redisbackend.Backend
	mu           sync.Mutex
	acquireDelay time.Duration
	renewDelay   func(reqs []fencelock.RenewRequest) time.Duration
}

func (s *slowReplies) Acquire(ctx context.Context, req fencelock.AcquireRequest) (fencelock.AcquireResult, error) {
	res, err := s.Backend.Acquire(ctx, req)
	s.mu.Lock()
	d := s.acquireDelay
	s.mu.Unlock()
	time.Sleep(d)
	return res, err
}

func (s *slowReplies) Renew(ctx context.Context, reqs []fencelock.RenewRequest) ([]fencelock.RenewResult, error) {
	res, err := s.Backend.Renew(ctx, reqs)
	s.mu.Lock()
	f := s.renewDelay
	s.mu.Unlock()
	if f != nil {
		time.Sleep(f(reqs))
	}
	return res, err
}

// A Refresh whose reply is slow must not leave the local deadline past the
// server's lease, whatever the automatic renewal does meanwhile.
func TestRefreshAndRenewalTakeTurns(t *testing.T) {
	_, rdb := startRedis(t)
	slow := &slowReplies{Backend: redisbackend.New(rdb)}
	c := fencelock.New(slow)
	t.Cleanup(func() { c.Close() })
	ctx := ctxTimeout(t, 20*time.Second)

	lk, err := c.TryAcquire(ctx, "turns", time.Second, fencelock.WithAutoRenew(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	slow.mu.Lock()
	slow.renewDelay = func(reqs []fencelock.RenewRequest) time.Duration {
		if reqs[0].TTL == 5*time.Second {
			return 400 * time.Millisecond // the Refresh's reply is late
		}
		return 0
	}
	slow.mu.Unlock()
	if err := lk.Refresh(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for range 5 { // renewals go on with the new ttl
		pttl := rdb.PTTL(ctx, "lock:{turns}:lock").Val()
		local := time.Until(lk.Deadline())
		if local > pttl+50*time.Millisecond {
			t.Fatalf("local deadline in %v, but the server lease ends in %v", local, pttl)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if pttl := rdb.PTTL(ctx, "lock:{turns}:lock").Val(); pttl < 4*time.Second {
		t.Fatalf("server lease %v after Refresh(5s) and renewals", pttl)
	}
}

// Close waits for an acquire in flight and releases what it took: no key
// is left locked by nobody.
func TestCloseWaitsForAcquireInFlight(t *testing.T) {
	_, rdb := startRedis(t)
	slow := &slowReplies{Backend: redisbackend.New(rdb), acquireDelay: 300 * time.Millisecond}
	c := fencelock.New(slow)
	ctx := ctxTimeout(t, 20*time.Second)

	var wg sync.WaitGroup
	for _, try := range []bool{true, false} {
		wg.Go(func() {
			var lk *fencelock.Lock
			var err error
			key := "inflight-acquire"
			if try {
				key = "inflight-try"
				lk, err = c.TryAcquire(ctx, key, 10*time.Second)
			} else {
				lk, err = c.Acquire(ctx, key, 10*time.Second)
			}
			if err == nil {
				<-lk.Done() // released by Close
			}
		})
	}
	time.Sleep(100 * time.Millisecond) // both requests applied, replies pending
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, "lock:{inflight-try}:lock", "lock:{inflight-acquire}:lock").Val(); n != 0 {
		t.Fatalf("%d keys left locked after Close", n)
	}
	wg.Wait()
}

// lateAcquire delivers an acquire to the server only after its caller has
// given up: a request stuck in the network that still arrives. The result
// of the late request goes to landed.
type lateAcquire struct {
	*redisbackend.Backend
	delay  time.Duration
	landed chan fencelock.AcquireResult
}

func (l *lateAcquire) Acquire(ctx context.Context, req fencelock.AcquireRequest) (fencelock.AcquireResult, error) {
	go func() {
		time.Sleep(l.delay)
		res, _ := l.Backend.Acquire(context.WithoutCancel(ctx), req)
		l.landed <- res
	}()
	<-ctx.Done()
	return fencelock.AcquireResult{}, ctx.Err()
}

// An acquire that lands after its caller gave up (and after the clean-up
// release) is refused: the clean-up leaves a tombstone for its token, so the
// late copy cannot take the lock for nobody.
func TestLateAcquireIsRefused(t *testing.T) {
	_, rdb := startRedis(t)
	late := &lateAcquire{Backend: redisbackend.New(rdb), delay: 300 * time.Millisecond, landed: make(chan fencelock.AcquireResult, 1)}
	c := fencelock.New(late)
	t.Cleanup(func() { c.Close() })
	other := newClient(t, rdb)
	ctx := ctxTimeout(t, 20*time.Second)

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.TryAcquire(short, "late", 30*time.Second); !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("TryAcquire through a backend that never answers in time: %v, want ErrUnavailable", err)
	}
	var res fencelock.AcquireResult
	select {
	case res = <-late.landed:
	case <-ctx.Done():
		t.Fatal("the late acquire never reached the server")
	}
	if res.Acquired {
		t.Fatal("the late acquire took the lock after its caller had given up and cleaned up")
	}
	lk, err := other.TryAcquire(ctx, "late", time.Second)
	if err != nil {
		t.Fatalf("the key is not free after the late acquire: %v", err)
	}
	lk.Release(ctx)
}
