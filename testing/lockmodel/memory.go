package lockmodel

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/memorybackend"
)

// Memory is the target of the memory backend under testing/synctest:
// every operation and fault, in exact virtual time.
func Memory() Target {
	return Target{
		Name:     "memory",
		Virtual:  true,
		NewStore: func(TB) Store { return &memoryStore{b: memorybackend.New()} },
		Features: Semaphores | RWLocks | Fairness | Inspect | Faults | Partitions,
		Clients:  3,
		TTLs:     []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond, time.Second, 3 * time.Second},
		Waits:    []time.Duration{0, 50 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second},
		Advances: []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second},
		Cuts:     []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second},
		Job:      fencelock.Job{Period: 2 * time.Second, LockAtLeast: 500 * time.Millisecond, LockAtMost: 1500 * time.Millisecond},
		Permits:  2,
		Checks:   200,
		Steps:    100,
	}
}

// memoryStore is a memory backend shared by the Clients of a check.
type memoryStore struct{ b *memorybackend.Backend }

func (s *memoryStore) Backend() driver.Store { return &clientMemory{Backend: s.b} }
func (s *memoryStore) Namespace() string     { return "" }
func (s *memoryStore) Close()                { s.b.Close() }

func (s *memoryStore) View(fam Family, key string) (View, bool) {
	ns := fencelock.DefaultNamespace
	now := time.Now()
	var v View
	switch fam {
	case FamLock:
		st := s.b.State(ns, key)
		for _, h := range st.Holds {
			v.Holds = append(v.Holds, Hold{Token: h.Token, End: now.Add(h.TTL)})
		}
		v.Counter = st.LastFence
	case FamSem, FamRW:
		var st memorybackend.HoldState
		if fam == FamSem {
			st = s.b.SemaphoreState(ns, key)
		} else {
			st = s.b.RWState(ns, key)
		}
		for tok, end := range st.Holds {
			v.Holds = append(v.Holds, Hold{Token: tok, End: end, Write: fam == FamRW && tok == st.Writer})
		}
		v.Counter = st.Counter
	}
	return v, true
}

func (s *memoryStore) Inject(f Fault) (clear func()) {
	ops := map[FaultOps]memorybackend.Op{
		FaultAllOps: memorybackend.AllOps, FaultAcquire: memorybackend.Acquire, FaultRelease: memorybackend.Release,
		FaultRenew: memorybackend.Renew, FaultTTL: memorybackend.TTL,
	}[f.Ops]
	mf := memorybackend.Fault{Ops: ops, Times: f.Times}
	switch f.Kind {
	case FaultLoseReply:
		mf.LoseReply = true
	case FaultReplyDelay:
		mf.ReplyDelay = f.Delay
	case FaultRequestDelay:
		mf.RequestDelay = f.Delay
	case FaultRefuse:
		mf.Refuse = true
	case FaultPause:
		return s.b.Pause()
	}
	return s.b.Inject(mf)
}

// clientMemory gives one Client the shared backend with every capability,
// hides its Close (the store closes it once, after the Clients), and can
// cut the Client off from it (Partitioner): its requests are then refused,
// unapplied, as a network partition would, while the other Clients go on.
// Its holds lapse on the store without a release: their waiters elsewhere
// find them free only by their fallback timers.
type clientMemory struct {
	*memorybackend.Backend
	cut atomic.Bool
}

func (*clientMemory) Close() error { return nil }

// Cut implements Partitioner.
func (b *clientMemory) Cut(on bool) { b.cut.Store(on) }

// refused is the error of a request of a Client cut off.
func (b *clientMemory) refused() error {
	if b.cut.Load() {
		return memorybackend.ErrRefused
	}
	return nil
}

func (b *clientMemory) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := b.refused(); err != nil {
		return driver.Result{}, err
	}
	return b.Backend.Acquire(ctx, req)
}

func (b *clientMemory) Release(ctx context.Context, req driver.ReleaseRequest) (driver.ReleaseResult, error) {
	if err := b.refused(); err != nil {
		return driver.ReleaseResult{}, err
	}
	return b.Backend.Release(ctx, req)
}

func (b *clientMemory) HandOff(ctx context.Context, req driver.ReleaseRequest, next driver.Request) (driver.ReleaseResult, driver.Result, error) {
	if err := b.refused(); err != nil {
		return driver.ReleaseResult{}, driver.Result{}, err
	}
	return b.Backend.HandOff(ctx, req, next)
}

func (b *clientMemory) Renew(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	if err := b.refused(); err != nil {
		return nil, err
	}
	return b.Backend.Renew(ctx, reqs)
}

func (b *clientMemory) TTL(ctx context.Context, ref driver.Ref) (time.Duration, error) {
	if err := b.refused(); err != nil {
		return 0, err
	}
	return b.Backend.TTL(ctx, ref)
}

func (b *clientMemory) AcquireInLine(ctx context.Context, req driver.Request, t driver.Turn) (driver.Result, error) {
	if err := b.refused(); err != nil {
		return driver.Result{}, err
	}
	return b.Backend.AcquireInLine(ctx, req, t)
}

func (b *clientMemory) InspectLock(ctx context.Context, namespace, key string) (driver.LockInfo, error) {
	if err := b.refused(); err != nil {
		return driver.LockInfo{}, err
	}
	return b.Backend.InspectLock(ctx, namespace, key)
}
