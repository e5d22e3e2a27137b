package fencelock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// MultiLock is several locks taken together, all or nothing, by AcquireAll:
// for an operation that spans several resources (move
// stock between two warehouses, merge two accounts). Each key is a lock of
// its own with its own fence; the MultiLock is held while all of them are,
// and ends (Done, Err) when the first of them ends. Its methods are safe
// for concurrent use; every method of a nil *MultiLock returns an error (or
// a zero value).
type MultiLock struct {
	locks []*Lock // in key order

	mu   sync.Mutex
	err  error         // the first lock's end; nil while all are held
	done chan struct{} // closed when err is set
}

// AcquireAll takes the locks named keys, waiting for each like Acquire,
// and returns them together once it holds all of them. It takes them one at
// a time in sorted key order, so two calls that share keys can never wait
// for each other in a cycle (no deadlock, whatever order the callers list
// the keys in). If any cannot be had (ctx ends, WithWait passes, an
// outage), it releases the ones it took and returns that key's error: all or
// nothing. The options apply to every lock; WithWait bounds the whole call,
// and WithWait(0) makes it a single attempt per key, which fails with an
// error matching ErrNotAcquired, holding none of them, as soon as one key is
// held by someone else.
//
// It is not atomic: while it waits for a later key, it holds the earlier
// ones, and others see them held. Keys must be distinct and not empty.
func (c *Client) AcquireAll(ctx context.Context, keys []string, ttl time.Duration, opts ...AcquireOption) (*MultiLock, error) {
	if c == nil {
		return nil, errNilClient
	}
	if ctx == nil {
		return nil, errNilContext
	}
	sorted, err := sortedKeys(keys)
	if err != nil {
		return nil, err
	}
	cfg, err := c.resolveAcquire(sorted[0], ttl, opts)
	if err != nil {
		return nil, err
	}
	if cfg.waitSet && cfg.wait > 0 {
		// One bound for the whole call, not one per key.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, cfg.wait, errWaitElapsed)
		defer cancel()
	}
	m := &MultiLock{done: make(chan struct{})}
	for _, key := range sorted {
		lk, err := c.Acquire(ctx, key, ttl, opts...)
		if err != nil {
			m.releaseTaken(ctx)
			return nil, err
		}
		m.locks = append(m.locks, lk)
	}
	m.whenEnded(m.end) // once, for the life of the locks
	return m, nil
}

// sortedKeys returns keys sorted, refusing an empty list, an empty key and a
// key given twice.
func sortedKeys(keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, invalid("keys", keys, "must name at least one lock")
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for i, k := range sorted {
		if k == "" {
			return nil, invalid("key", k, "must not be empty")
		}
		if i > 0 && sorted[i-1] == k {
			return nil, invalid("keys", keys, fmt.Sprintf("name %q twice", k))
		}
	}
	return sorted, nil
}

// releaseTaken releases, in reverse order, the locks taken before a
// failure. Their release errors are logged by Release and retried in the
// background; the failure that made the call give up is what the caller
// needs.
func (m *MultiLock) releaseTaken(ctx context.Context) {
	for _, lk := range slices.Backward(m.locks) {
		_ = lk.Release(ctx)
	}
}

// end records the first lock's end.
func (m *MultiLock) end(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		m.err = err
		close(m.done)
	}
}

var errNilMultiLock = errors.New("fencelock: nil *MultiLock")

// Locks returns the locks, in key order.
func (m *MultiLock) Locks() []*Lock {
	if m == nil {
		return nil
	}
	return slices.Clone(m.locks)
}

// Lock returns the lock of key, or nil if key is not one of them.
func (m *MultiLock) Lock(key string) *Lock {
	if m == nil {
		return nil
	}
	for _, lk := range m.locks {
		if lk.Key() == key {
			return lk
		}
	}
	return nil
}

// keys returns the keys, in order.
func (m *MultiLock) keys() []string {
	keys := make([]string, len(m.locks))
	for i, lk := range m.locks {
		keys[i] = lk.Key()
	}
	return keys
}

// Held reports whether every lock is still held.
func (m *MultiLock) Held() bool {
	if m == nil {
		return false
	}
	for _, lk := range m.locks {
		if !lk.Held() {
			return false
		}
	}
	return true
}

// Done is closed when the first of the locks is lost or released.
func (m *MultiLock) Done() <-chan struct{} {
	if m == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return m.done
}

// Err returns nil while every lock is held, then the error of the first one
// that ended: matching ErrLost when it was lost, ErrReleased when released.
func (m *MultiLock) Err() error {
	if m == nil {
		return errNilMultiLock
	}
	for _, lk := range m.locks {
		lk.Err() // ends a lock whose deadline has passed, which calls end
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Context returns a copy of ctx that is cancelled, with the first ended
// lock's error as its cause (context.Cause), when any of the locks ends.
// Call cancel when done. It panics when ctx is nil, as context.WithCancel
// does.
func (m *MultiLock) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	mustContext("MultiLock.Context", ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	if m == nil {
		cancel(errNilMultiLock)
		return ctx, func() {}
	}
	stop := m.whenEnded(func(err error) { cancel(err) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// whenEnded runs f with the error of the first lock that ends (the first
// call wins), at once if one already has. The returned func unregisters it.
func (m *MultiLock) whenEnded(f func(error)) (stop func()) {
	var once sync.Once
	stops := make([]func(), 0, len(m.locks))
	for _, lk := range m.locks {
		stops = append(stops, lk.whenEnded(func(err error) { once.Do(func() { f(err) }) }))
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

// Release releases every lock, in reverse key order, and returns the
// errors of those that could not be released, as one error on one line
// that matches each of them (what Lock.Release returns).
func (m *MultiLock) Release(ctx context.Context) error {
	if m == nil {
		return errNilMultiLock
	}
	if ctx == nil {
		return errNilContext
	}
	var errs []error
	for _, lk := range slices.Backward(m.locks) {
		if err := lk.Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	m.end(ErrReleased) // if no lock's end came first
	return joinErrors(errs...)
}

// DoAll runs fn while holding every lock named keys: AcquireAll, renewal of
// each every ttl/3 (WithAutoRenew changes that), fn with a context
// cancelled the moment any of them is lost, and the release of all of them,
// also when fn panics. Its errors are Do's.
func (c *Client) DoAll(ctx context.Context, keys []string, ttl time.Duration, fn func(ctx context.Context, m *MultiLock) error, opts ...AcquireOption) (err error) {
	if c == nil {
		return errNilClient
	}
	if ctx == nil {
		return errNilContext
	}
	if fn == nil {
		return invalid("fn", nil, "must not be nil")
	}
	if checkTTL(ttl) == nil {
		opts = append([]AcquireOption{WithAutoRenew(ttl / 3)}, opts...)
	}
	defer c.ops.begin()()
	m, err := c.AcquireAll(ctx, keys, ttl, opts...)
	if err != nil {
		return err
	}
	return runHolding(c, ctx, m, fn, fmt.Sprintf("fencelock: do all %q", m.keys()))
}

// lostErr returns the error of the first of m's locks (in key order) that
// was lost, or nil.
func (m *MultiLock) lostErr() error {
	for _, lk := range m.locks {
		if err := lk.lostErr(); err != nil {
			return err
		}
	}
	return nil
}
