package memorybackend

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// tickRecord is a lock's record of the last job tick claimed
// (driver.Ticker). It lives apart from the lock's holds: a
// release or Delete does not touch it.
type tickRecord struct {
	tick, token string
	end         time.Time // the record lapses here; zero: no record
}

// AcquireTick implements driver.Ticker. It counts as an Acquire
// call, and Acquire's faults hit it.
func (b *Backend) AcquireTick(ctx context.Context, req driver.TickRequest) (driver.TickResult, error) {
	if req.Kind != driver.KindLock {
		return driver.TickResult{}, fmt.Errorf("%w: job ticks are recorded with plain locks only", driver.ErrUnsupported)
	}
	if err := checkRef(req.Ref); err != nil {
		return driver.TickResult{}, err
	}
	if req.Owner == "" {
		return driver.TickResult{}, &driver.InvalidArgumentError{Name: "owner", Value: req.Owner, Reason: "must not be empty"}
	}
	if err := checkTTL(req.TTL); err != nil {
		return driver.TickResult{}, err
	}
	if req.Tick == "" || strings.IndexByte(req.Tick, 0) >= 0 {
		return driver.TickResult{}, &driver.InvalidArgumentError{Name: "tick", Value: req.Tick, Reason: "must be non-empty, without a NUL byte"}
	}
	if req.RecordLife <= 0 {
		return driver.TickResult{}, &driver.InvalidArgumentError{Name: "record life", Value: req.RecordLife, Reason: "must be positive"}
	}
	return do(b, ctx, Acquire, func(now time.Time) (driver.TickResult, error) {
		id := idOf(req.Ref)
		l := b.lockFor(id)
		l.prune(now)
		if _, ok := l.tombstones[req.Token]; ok {
			return driver.TickResult{Result: driver.Result{HolderTTL: l.holderTTL(now)}}, nil
		}
		if r := l.record; !r.end.IsZero() && r.tick >= req.Tick && (r.tick != req.Tick || r.token != req.Token) {
			return driver.TickResult{Claimed: true, LastTick: r.tick, LastToken: r.token}, nil
		}
		res := l.acquire(now, req.Request)
		if res.Acquired {
			l.record = tickRecord{tick: req.Tick, token: req.Token, end: now.Add(req.RecordLife)}
		}
		b.acquiredLocked(id, req.Request, res)
		return driver.TickResult{Result: res}, nil
	})
}

// TickRecord returns the record of the last job tick claimed for the lock
// named by namespace and key (driver.Ticker): its tick, the
// token that claimed it, and its remaining life; all zero when there is
// none, or it lapsed. It is not a call: it is not counted, and faults and
// Pause do not affect it.
func (b *Backend) TickRecord(namespace, key string) (tick, token string, ttl time.Duration) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.locks[lockID{namespace, key}]
	if l == nil {
		return "", "", 0
	}
	l.prune(now)
	if l.record.end.IsZero() {
		return "", "", 0
	}
	return l.record.tick, l.record.token, l.record.end.Sub(now)
}
