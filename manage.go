package fencelock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Management by key: what a process can learn and do about a lock it holds
// no *Lock for. Inspect and ForceRelease need a backend that implements
// LockInspector; ReleaseToken works on every backend.

// LockInspector is implemented by backends that can report the state of any
// lock by its name (the Redis and memory backends do). Client.Inspect and
// Client.ForceRelease need it; with a backend that lacks it they return an
// error matching ErrUnsupported.
type LockInspector interface {
	// InspectLock reads the state of the lock named by namespace and key,
	// in one round trip, and changes nothing. A lapsed hold is not in it.
	InspectLock(ctx context.Context, namespace, key string) (LockInfo, error)
}

// LockInfo is the state of one lock as the backend sees it.
type LockInfo struct {
	// Key is the lock's name, without namespace.
	Key string
	// Held reports whether the lock has a live hold. The fields below up to
	// TTL are zero when it has none.
	Held bool
	// Owner is the holder: its WithOwner value, or the owner token of its
	// one hold without WithOwner.
	Owner string
	// Identity is what the holder's Client gave WithIdentity (host:pid, a
	// pod name), "" when it gave none or the backend does not record it.
	Identity string
	// Fence is the holder's fencing token.
	Fence int64
	// Holds are the live holds (one, or more when the owner re-entered),
	// sorted by token.
	Holds []HoldInfo
	// TTL is the lock's remaining lease (its longest hold's), measured by
	// the server.
	TTL time.Duration
	// LastFence is the last fencing token minted for the key (0 when the
	// backend has no record of one); the next acquisition gets a larger one.
	LastFence int64
}

// HoldInfo is one live hold of a lock.
type HoldInfo struct {
	Token string        // the hold's owner token (Lock.Token)
	TTL   time.Duration // its remaining lease, measured by the server
}

// Inspect returns the state of the lock named key: whether it is held, by
// whom, with which fence, its holds and their remaining leases. It changes
// nothing. It returns an error matching ErrUnsupported when the backend does
// not implement LockInspector, and one matching ErrUnavailable when the
// backend could not be asked.
func (c *Client) Inspect(ctx context.Context, key string) (LockInfo, error) {
	if c == nil {
		return LockInfo{}, errNilClient
	}
	defer c.ops.begin()()
	inspector, err := c.inspector("inspect", key)
	if err != nil {
		return LockInfo{}, err
	}
	return c.inspect(ctx, inspector, key)
}

// inspect asks inspector about key, with the Client's namespace and errors.
func (c *Client) inspect(ctx context.Context, inspector LockInspector, key string) (LockInfo, error) {
	start := time.Now()
	info, err := inspector.InspectLock(ctx, c.cfg.namespace, key)
	switch {
	case errors.Is(err, ErrInvalidArgument):
		return LockInfo{}, lockError("inspect", key, err)
	case err != nil:
		return LockInfo{}, c.unavailable(ctx, "inspect", key, 1, start, err)
	}
	info.Key = key
	return info, nil
}

// inspector checks the arguments of a call by key and returns the
// backend's LockInspector, or an error naming what is missing.
func (c *Client) inspector(op, key string) (LockInspector, error) {
	if err := c.checkKey(op, key); err != nil {
		return nil, err
	}
	inspector, ok := c.backend.(LockInspector)
	if !ok {
		return nil, lockError(op, key, fmt.Errorf("%w: %T does not implement LockInspector", ErrUnsupported, c.backend))
	}
	return inspector, nil
}

// checkKey refuses an empty key, and any call once the Client is closed.
func (c *Client) checkKey(op, key string) error {
	if key == "" {
		return invalid("key", key, "must not be empty")
	}
	if c.closed() {
		return lockError(op, key, ErrClosed)
	}
	return nil
}

// ReleaseToken gives up the hold of the lock named key whose owner token is
// token (Lock.Token), without the *Lock: for a lock taken in one request and
// released in another, or by another process. It releases nothing unless the
// lock holds that token: it returns an error matching ErrNotHeld when the
// hold expired, was released, or never existed. Re-entrant holds are
// honoured: only this token's hold goes, and remaining is the number of
// holds the owner still has (0: the lock is free, and waiters are woken).
// It returns an error matching ErrUnavailable when the release could not be
// confirmed; unlike Lock.Release it is not retried in the background, so
// the caller can decide.
//
// A *Lock of this Client for the same hold ends at once, lost (ErrLost,
// LostGone), and this Client's waiters for the key go ahead; a *Lock of
// another Client or process learns that the hold is gone at its next
// renewal (or its lease deadline), and is then lost. Release through the
// *Lock when you have it.
func (c *Client) ReleaseToken(ctx context.Context, key, token string) (remaining int, err error) {
	if c == nil {
		return 0, errNilClient
	}
	defer c.ops.begin()()
	if err := c.checkKey("release", key); err != nil {
		return 0, err
	}
	if token == "" {
		return 0, invalid("token", token, "must not be empty")
	}
	// The hold's deadline is unknown here, so a retry that finds nothing
	// after a lost reply is reported as ErrNotHeld, never guessed released.
	ref := c.ref(key, token)
	res, err := c.sendRelease(ctx, ReleaseRequest{LockRef: ref}, time.Time{})
	switch {
	case err != nil:
		return 0, err
	case !res.Held:
		return 0, lockError("release", key, ErrNotHeld)
	}
	c.endHere(ref, "released by its token (Client.ReleaseToken), not through the *Lock")
	if res.Remaining == 0 && !res.Yielded {
		c.queues.released(key)
	}
	c.log.Info("fencelock: released by token", "key", key, "token", shortToken(token), "holds_left", res.Remaining)
	return res.Remaining, nil
}

// endHere ends this Client's *Lock for the hold ref, if it has one, as
// lost: the hold was released by its token, not through the *Lock. Its
// end also lets the Client's waiters for the key attempt again (they make
// none while the Client holds the key).
func (c *Client) endHere(ref LockRef, reason string) {
	if lk := c.leases.find(ref); lk != nil {
		lk.lose(LostGone, reason, false)
	}
}

// maxForceRounds bounds ForceRelease's rounds of release-and-look: a round
// frees the lock unless its owner re-entered it meanwhile.
const maxForceRounds = 5

// ForceRelease frees the lock named key from the holder it has when the
// call begins, for operators: a holder that is stuck, or whose process is
// gone while its lease is long. reason is required and is logged at Warn
// level through the Client's logger (WithLogger): once with the holder,
// its fence and its holds before anything is released, and once with what
// was released.
//
// It releases the holder's holds by their tokens, and the re-entries the
// holder takes while it runs (they have its fence), and never a hold with
// a later fence: a process that takes the lock the moment it is free keeps
// it (the log names its fence). Each token is released only after a look
// at the lock showed it as a hold with the holder's fence; tokens are
// unique to an acquisition and a re-entry keeps the fence, so a hold taken
// meanwhile is never among them. The fence counter is left alone: the next
// acquisition still gets a larger fence, and the holder that was forced
// out, if it is still running, has its writes refused by the fencing check.
// That holder's *Lock ends at once, lost (ErrLost, LostGone), when it is of
// this Client; of another Client or process, at its next renewal.
//
// It returns the state the lock had before (Held false: it was free, and
// nothing was done). It needs a backend that implements LockInspector
// (ErrUnsupported otherwise) and returns an error matching ErrUnavailable
// when the backend could not be reached, and one matching ErrNotAcquired
// when the owner kept re-entering the lock faster than it could be freed.
func (c *Client) ForceRelease(ctx context.Context, key, reason string) (LockInfo, error) {
	if c == nil {
		return LockInfo{}, errNilClient
	}
	defer c.ops.begin()()
	inspector, err := c.inspector("force release", key)
	if err != nil {
		return LockInfo{}, err
	}
	if reason == "" {
		return LockInfo{}, invalid("reason", reason, "ForceRelease needs a reason, for the log")
	}
	before, err := c.inspect(ctx, inspector, key)
	if err != nil || !before.Held {
		return before, err
	}
	c.log.Warn("fencelock: force release", "key", key, "reason", reason, "owner", before.Owner,
		"fence", before.Fence, "holds", len(before.Holds), "tokens", shortTokens(before.Holds), "ttl", before.TTL)
	var released []HoldInfo
	done := func(next LockInfo, err error) (LockInfo, error) {
		attrs := []any{"key", key, "reason", reason, "fence", before.Fence, "released", len(released), "tokens", shortTokens(released)}
		if next.Held {
			attrs = append(attrs, "next_fence", next.Fence, "next_owner", next.Owner)
		}
		if err != nil {
			attrs = append(attrs, "err", err)
		}
		c.log.Warn("fencelock: force released", attrs...)
		return before, err
	}
	info := before
	for range maxForceRounds {
		for _, h := range info.Holds {
			// A hold that lapsed or was released since the look is simply
			// not found: that is what we want.
			ref := c.ref(key, h.Token)
			res, err := c.sendRelease(ctx, ReleaseRequest{LockRef: ref}, time.Time{})
			if err != nil {
				return done(LockInfo{}, err)
			}
			if res.Held {
				released = append(released, h)
				c.endHere(ref, "force-released (Client.ForceRelease): "+reason)
				if res.Remaining == 0 && !res.Yielded {
					c.queues.released(key)
				}
			}
		}
		if info, err = c.inspect(ctx, inspector, key); err != nil {
			return done(LockInfo{}, err)
		}
		if !info.Held || info.Fence != before.Fence {
			// Free, or taken since by another acquisition: not ours to free.
			return done(info, nil)
		}
		// The holder re-entered meanwhile: its new holds go too.
	}
	return done(info, lockError("force release", key, fmt.Errorf(
		"%w: its owner re-entered it in each of %d rounds of releases", ErrNotAcquired, maxForceRounds)))
}

// shortTokens returns the holds' tokens, shortened for a log line.
func shortTokens(holds []HoldInfo) []string {
	tokens := make([]string, 0, len(holds))
	for _, h := range holds {
		tokens = append(tokens, shortToken(h.Token))
	}
	return tokens
}
