package fencelock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
)

// slowReplies wraps the real Redis backend and holds back replies after the
// server has applied the request: a slow network that a real server cannot
// produce on demand. Everything else goes to the server as is. Its sleeps are
// the fault it injects.
type slowReplies struct {
	*redisbackend.Backend
	mu           sync.Mutex
	acquireDelay time.Duration
	renewDelay   func(reqs []driver.RenewRequest) time.Duration
	// applied, if not nil, gets a value for each acquire the server has
	// applied, before its reply is held back.
	applied chan struct{}
	// renewals counts the renewal replies delivered, by the ttl of the
	// batch's first request.
	renewals sync.Map // time.Duration -> *atomic.Int64
}

func (s *slowReplies) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	res, err := s.Backend.Acquire(ctx, req)
	s.mu.Lock()
	d, applied := s.acquireDelay, s.applied
	s.mu.Unlock()
	if applied != nil {
		applied <- struct{}{}
	}
	time.Sleep(d) // the fault: a late reply
	return res, err
}

func (s *slowReplies) Renew(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	res, err := s.Backend.Renew(ctx, reqs)
	s.mu.Lock()
	f := s.renewDelay
	s.mu.Unlock()
	if f != nil {
		time.Sleep(f(reqs)) // the fault: a late reply
	}
	n, _ := s.renewals.LoadOrStore(reqs[0].TTL, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	return res, err
}

// renewed returns how many renewal replies with ttl were delivered.
func (s *slowReplies) renewed(ttl time.Duration) int64 {
	n, ok := s.renewals.Load(ttl)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

// A Refresh whose reply is slow must not leave the local deadline past the
// server's lease, whatever the automatic renewal does meanwhile.
func TestRefreshAndRenewalTakeTurns(t *testing.T) {
	t.Parallel()
	_, rdb := startRedis(t)
	slow := &slowReplies{Backend: redisbackend.New(rdb)}
	c := fencelock.New(slow)
	t.Cleanup(func() { c.Close() })
	ctx := ctxTimeout(t, 60*time.Second)

	const ttl, refreshed = 2 * time.Second, 10 * time.Second
	lk, err := c.TryAcquire(ctx, "turns", ttl, fencelock.WithAutoRenew(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	slow.mu.Lock()
	slow.renewDelay = func(reqs []driver.RenewRequest) time.Duration {
		if reqs[0].TTL == refreshed {
			return 400 * time.Millisecond // the Refresh's reply is late, and so are the renewals' after it
		}
		return 0
	}
	slow.mu.Unlock()
	if err := lk.Refresh(ctx, refreshed); err != nil {
		t.Fatal(err)
	}
	// Renewals go on with the new ttl; through three of them, the local
	// deadline never passes the server's lease.
	checks := 0
	waitUntil(t, 30*time.Second, "three renewals after the Refresh", func() bool {
		deadline := lk.Deadline()
		before := time.Now()
		pttl := rdb.PTTL(ctx, "lock:{turns}:lock").Val()
		// The server's lease ends no earlier than before+pttl (less the
		// millisecond PTTL truncates): the local deadline must not be
		// later.
		if serverEnd := before.Add(pttl - time.Millisecond); deadline.After(serverEnd) {
			t.Fatalf("local deadline %v after the server's lease end (%v)", deadline, serverEnd)
		}
		checks++
		return slow.renewed(refreshed) >= 4 // the Refresh and three renewals
	})
	if !lk.Held() {
		t.Fatalf("lock lost: %v", lk.Err())
	}
	if pttl := rdb.PTTL(ctx, "lock:{turns}:lock").Val(); pttl <= ttl {
		t.Fatalf("server lease %v after Refresh(%v) and renewals, want the longer lease", pttl, refreshed)
	}
	t.Logf("%d checks", checks)
}

// Close waits for an acquire in flight and releases what it took: no key
// is left locked by nobody.
func TestCloseWaitsForAcquireInFlight(t *testing.T) {
	_, rdb := startRedis(t)
	slow := &slowReplies{Backend: redisbackend.New(rdb), acquireDelay: 300 * time.Millisecond, applied: make(chan struct{}, 2)}
	c := fencelock.New(slow)
	t.Cleanup(func() { c.Close() }) // when the test fails before its own Close
	ctx := ctxTimeout(t, 60*time.Second)

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
	// Close once both requests are applied and their replies pending.
	for range 2 {
		select {
		case <-slow.applied:
		case <-ctx.Done():
			t.Fatal("the acquires were not applied")
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, "lock:{inflight-try}:lock", "lock:{inflight-acquire}:lock").Val(); n != 0 {
		t.Fatalf("%d keys left locked after Close", n)
	}
	wg.Wait()
}

// lateAcquire delivers an acquire to the server only after its caller has
// given up and the Client has cleaned up after it (a release with a
// tombstone): a request stuck in the network that still arrives. The result
// of the late request goes to landed.
type lateAcquire struct {
	*redisbackend.Backend
	cleanedUp chan struct{} // closed when a release with a tombstone was applied
	once      sync.Once
	stop      chan struct{} // closed at the end of the test
	landed    chan driver.Result
}

func (l *lateAcquire) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	go func() {
		select {
		case <-l.cleanedUp:
		case <-l.stop:
			return
		}
		res, _ := l.Backend.Acquire(context.WithoutCancel(ctx), req)
		l.landed <- res
	}()
	<-ctx.Done()
	return driver.Result{}, ctx.Err()
}

func (l *lateAcquire) Release(ctx context.Context, req driver.ReleaseRequest) (driver.ReleaseResult, error) {
	res, err := l.Backend.Release(ctx, req)
	if err == nil && req.Tombstone > 0 {
		l.once.Do(func() { close(l.cleanedUp) })
	}
	return res, err
}

// An acquire that lands after its caller gave up (and after the clean-up
// release) is refused: the clean-up leaves a tombstone for its token, so the
// late copy cannot take the lock for nobody.
func TestLateAcquireIsRefused(t *testing.T) {
	_, rdb := startRedis(t)
	late := &lateAcquire{
		Backend:   redisbackend.New(rdb),
		cleanedUp: make(chan struct{}),
		stop:      make(chan struct{}),
		landed:    make(chan driver.Result, 1),
	}
	c := fencelock.New(late)
	t.Cleanup(func() { close(late.stop); c.Close() })
	other := newClient(t, rdb)
	ctx := ctxTimeout(t, 60*time.Second)

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.TryAcquire(short, "late", 30*time.Second); !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("TryAcquire through a backend that never answers in time: %v, want ErrUnavailable", err)
	}
	var res driver.Result
	select {
	case res = <-late.landed:
	case <-ctx.Done():
		t.Fatal("no clean-up release with a tombstone, or the late acquire never reached the server")
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
