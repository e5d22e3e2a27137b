package fencelock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Management by key: what a process can learn and do about a lock it holds
// no *Lock for. Inspect and ForceRelease need a store that can report a
// lock's holds (driver.Inspector); ReleaseToken works on every store.

// LockInfo is the state of one name as the backend sees it: its plain lock
// and the holds of the semaphore and the read-write lock of the same name
// (see driver.LockInfo).
type LockInfo = driver.LockInfo

// Inspect returns the state of the lock named key: whether it is held, by
// whom, with which fence, its holds and their remaining leases, and the
// holds of the semaphore and the read-write lock of the same name
// (LockInfo.Others). It changes nothing. It returns an error matching ErrUnsupported when the store cannot
// report a lock's holds (driver.Inspector), and one matching ErrUnavailable when the
// backend could not be asked.
func (c *Client) Inspect(ctx context.Context, key string) (LockInfo, error) {
	if c == nil {
		return LockInfo{}, errNilClient
	}
	if ctx == nil {
		return LockInfo{}, errNilContext
	}
	defer c.ops.begin()()
	inspector, err := c.inspector("inspect", key)
	if err != nil {
		return LockInfo{}, err
	}
	return c.inspect(ctx, inspector, key)
}

// inspect asks inspector about key, with the Client's namespace and errors.
func (c *Client) inspect(ctx context.Context, inspector driver.Inspector, key string) (LockInfo, error) {
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
// store's driver.Inspector, or an error naming what is missing.
func (c *Client) inspector(op, key string) (driver.Inspector, error) {
	if err := c.checkKey(op, key); err != nil {
		return nil, err
	}
	inspector := c.holdsOf
	if inspector == nil {
		return nil, lockError(op, key, fmt.Errorf("%w: %T cannot report a lock's holds (driver.Inspector)", ErrUnsupported, c.store))
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
// lostGone), and this Client's waiters for the key go ahead; it ends too
// when the release could not be confirmed (the hold may be gone), and then
// a retry that finds the hold gone counts it as released. A *Lock of
// another Client or process learns that the hold is gone at its next
// renewal (or its lease deadline), and is then lost. Release through the
// *Lock when you have it.
func (c *Client) ReleaseToken(ctx context.Context, key, token string) (remaining int, err error) {
	if c == nil {
		return 0, errNilClient
	}
	if ctx == nil {
		return 0, errNilContext
	}
	defer c.ops.begin()()
	if err := c.checkKey("release", key); err != nil {
		return 0, err
	}
	if token == "" {
		return 0, invalid("token", token, "must not be empty")
	}
	ref := c.ref(key, token)
	res, err := c.sendReleaseTo(ctx, driver.ReleaseRequest{Ref: ref}, c.heldUntilHere(ref), nil)
	// This Client's *Lock of the hold, if any, ends whatever the reply:
	// the hold is gone, or may be (a lost reply), and was asked to go.
	if !errors.Is(err, ErrInvalidArgument) {
		c.endHere(ref, "released by its token (Client.ReleaseToken), not through the *Lock")
	}
	switch {
	case err != nil:
		return 0, err
	case !res.Held:
		return 0, lockError("release", key, ErrNotHeld)
	}
	if res.Remaining == 0 && !res.Yielded {
		c.queues.Released(key)
	}
	c.log.Info("fencelock: released by token", "key", key, "token", shortToken(token), "holds_left", res.Remaining)
	return res.Remaining, nil
}

// heldUntilHere is the deadline of this Client's *Lock for the hold ref,
// or zero when it has none. With it, a retried release that finds nothing
// after a lost reply counts the hold as released by the first request;
// without it (another process's hold) the retry reports ErrNotHeld, never
// a guess.
func (c *Client) heldUntilHere(ref driver.Ref) time.Time {
	if h := c.leases.Find(ref); h != nil {
		lk := (*Lock)(h.(*keptLock))
		return lk.Deadline()
	}
	return time.Time{}
}

// endHere ends this Client's *Lock for the hold ref, if it has one, as
// lost: the hold was released by its token, not through the *Lock. Its
// end also lets the Client's waiters for the key attempt again (they make
// none while the Client holds the key).
func (c *Client) endHere(ref driver.Ref, reason string) {
	if h := c.leases.Find(ref); h != nil {
		lk := (*Lock)(h.(*keptLock))
		lk.lose(lostGone, reason, false)
	}
}

// maxForceRounds bounds ForceRelease's rounds of release-and-look: a round
// frees the lock unless its owner re-entered it meanwhile.
const maxForceRounds = 5

// ForceRelease frees the name key from the holders it has when the call
// begins, for operators: a holder that is stuck, or whose process is gone
// while its lease is long. With no kinds it frees every kind of hold of
// the name: the plain lock's holder, every permit of the semaphore, and
// the read and write holds of the read-write lock of that name; kinds
// (KindLock, KindSemaphore, KindRead, KindWrite) restricts it to those.
// reason is required and is logged at Warn level through the Client's
// logger (WithLogger): once with the holders, their fences and holds
// before anything is released, and once with what was released.
//
// It releases holds by their tokens, only those it saw at the start and
// the re-entries the lock's holder takes while it runs (they have its
// fence), never a hold with a later fence: a process that takes the lock
// or a permit the moment it is free keeps it (the log names the lock's
// next fence). Each token is released only after a look showed it as a
// hold of the holder's fence; tokens are unique to an acquisition and a
// re-entry keeps the fence, so nothing taken meanwhile is among them. The
// fence counters are left alone: the next acquisition still gets a larger
// fence, and a holder that was forced out, if it is still running, has its
// writes refused by the fencing check. Its *Lock ends at once, lost
// (ErrLost, lostGone), when it is of this Client; of another Client or
// process, at its next renewal.
//
// It returns the state the name had before, of every kind (AnyHeld false:
// nothing was held, and nothing was done). It needs a store that
// can report a lock's holds (driver.Inspector; ErrUnsupported otherwise) and returns an error
// matching ErrUnavailable when the backend could not be reached, and one
// matching ErrNotAcquired when the lock's owner kept re-entering it faster
// than it could be freed.
func (c *Client) ForceRelease(ctx context.Context, key, reason string, kinds ...Kind) (LockInfo, error) {
	if c == nil {
		return LockInfo{}, errNilClient
	}
	if ctx == nil {
		return LockInfo{}, errNilContext
	}
	defer c.ops.begin()()
	inspector, err := c.inspector("force release", key)
	if err != nil {
		return LockInfo{}, err
	}
	if err := checkForceArgs(reason, kinds); err != nil {
		return LockInfo{}, err
	}
	before, err := c.inspect(ctx, inspector, key)
	if err != nil {
		return before, err
	}
	f := &forcing{c: c, ctx: ctx, inspector: inspector, key: key, reason: reason, before: before,
		lock: before.Held && wantedKind(kinds, KindLock), others: wantedHolds(before.Others, kinds)}
	if !f.lock && len(f.others) == 0 {
		return before, nil
	}
	f.logStart()
	err = f.run()
	f.logDone(err)
	return before, err
}

// checkForceArgs checks ForceRelease's reason and kinds.
func checkForceArgs(reason string, kinds []Kind) error {
	if reason == "" {
		return invalid("reason", reason, "ForceRelease needs a reason, for the log")
	}
	for _, k := range kinds {
		if k > KindWrite {
			return invalid("kind", k, "must be KindLock, KindSemaphore, KindRead or KindWrite")
		}
	}
	return nil
}

// wantedKind reports whether ForceRelease with kinds frees holds of kind k
// (no kinds: every kind).
func wantedKind(kinds []Kind, k Kind) bool { return len(kinds) == 0 || slices.Contains(kinds, k) }

// wantedHolds returns the holds of the kinds ForceRelease frees.
func wantedHolds(holds []driver.HoldInfo, kinds []Kind) []driver.HoldInfo {
	var out []driver.HoldInfo
	for _, h := range holds {
		if wantedKind(kinds, h.Kind) {
			out = append(out, h)
		}
	}
	return out
}

// forcing is one ForceRelease: what it found, and what it released.
type forcing struct {
	c           *Client
	ctx         context.Context
	inspector   driver.Inspector
	key, reason string

	before LockInfo          // the state before
	lock   bool              // the lock is held and wanted
	others []driver.HoldInfo // the wanted holds of the other kinds

	released []driver.HoldInfo
	next     LockInfo // the lock's state after, when ForceRelease looked
}

// logStart logs what ForceRelease is about to free.
func (f *forcing) logStart() {
	attrs := []any{"key", f.key, "reason", f.reason}
	if f.lock {
		attrs = append(attrs, "owner", f.before.Owner, "fence", f.before.Fence, "holds", len(f.before.Holds),
			"tokens", shortTokens(f.before.Holds), "ttl", f.before.TTL)
	}
	if len(f.others) > 0 {
		attrs = append(attrs, "others", describeHolds(f.others))
	}
	f.c.log.Warn("fencelock: force release", attrs...)
}

// run releases the other kinds' holds, then the lock's holds, in rounds
// while its owner re-enters it under the same fence.
func (f *forcing) run() error {
	if err := f.releaseHolds(f.others); err != nil {
		return err
	}
	if !f.lock {
		return nil
	}
	f.next = f.before
	for range maxForceRounds {
		if err := f.releaseHolds(f.next.Holds); err != nil {
			return err
		}
		var err error
		if f.next, err = f.c.inspect(f.ctx, f.inspector, f.key); err != nil {
			return err
		}
		if !f.next.Held || f.next.Fence != f.before.Fence {
			// Free, or taken since by another acquisition: not ours to free.
			return nil
		}
		// The holder re-entered meanwhile: its new holds go too.
	}
	return lockError("force release", f.key, fmt.Errorf(
		"%w: its owner re-entered it in each of %d rounds of releases", ErrNotAcquired, maxForceRounds))
}

// releaseHolds releases holds, keeping those that were live.
func (f *forcing) releaseHolds(holds []driver.HoldInfo) error {
	for _, h := range holds {
		ok, err := f.c.forceReleaseHold(f.ctx, f.key, h, f.reason)
		if err != nil {
			return err
		}
		if ok {
			f.released = append(f.released, h)
			if hook := f.c.hooks.ForceReleased; hook != nil {
				hook(f.ctx, ReleaseEvent{Key: f.key, Kind: h.Kind, Fence: h.Fence, Reason: f.reason})
			}
		}
	}
	return nil
}

// logDone logs what ForceRelease freed, the lock's next holder if another
// acquisition took it meanwhile, and err.
func (f *forcing) logDone(err error) {
	attrs := []any{"key", f.key, "reason", f.reason}
	if f.lock {
		attrs = append(attrs, "fence", f.before.Fence)
	}
	attrs = append(attrs, "released", len(f.released), "tokens", describeHolds(f.released))
	if f.next.Held && f.next.Fence != f.before.Fence {
		attrs = append(attrs, "next_fence", f.next.Fence, "next_owner", f.next.Owner)
	}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	f.c.log.Warn("fencelock: force released", attrs...)
}

// forceReleaseHold releases h, a hold of key, by its token for
// ForceRelease, and reports whether it was live. A hold that lapsed or was
// released since it was seen is simply not found: that is what we want.
func (c *Client) forceReleaseHold(ctx context.Context, key string, h driver.HoldInfo, reason string) (bool, error) {
	if !c.store.Supports(h.Kind) {
		return false, lockError("force release", key, fmt.Errorf("%w: a %v hold, which %T does not keep", ErrUnsupported, h.Kind, c.store))
	}
	ref := c.ref(key, h.Token)
	ref.Kind = h.Kind
	res, err := c.sendReleaseTo(ctx, driver.ReleaseRequest{Ref: ref}, c.heldUntilHere(ref), nil)
	// This Client's *Lock of the hold, if any, ends whatever the reply:
	// the hold is gone, or may be (a lost reply), and was asked to go.
	if !errors.Is(err, ErrInvalidArgument) {
		c.endHere(ref, "force-released (Client.ForceRelease): "+reason)
	}
	if err != nil || !res.Held {
		return false, err
	}
	if h.Kind == KindLock && res.Remaining == 0 && !res.Yielded {
		c.queues.Released(key)
	}
	return true, nil
}

// shortTokens returns the holds' tokens, shortened for a log line.
func shortTokens(holds []driver.HoldInfo) []string {
	tokens := make([]string, 0, len(holds))
	for _, h := range holds {
		tokens = append(tokens, shortToken(h.Token))
	}
	return tokens
}

// describeHolds names holds of any kind for a log line: the token,
// shortened, after the kind and fence of a hold that is not the plain
// lock's ("semaphore/7/Ab3dE9xY").
func describeHolds(holds []driver.HoldInfo) []string {
	out := make([]string, 0, len(holds))
	for _, h := range holds {
		if h.Kind == KindLock {
			out = append(out, shortToken(h.Token))
		} else {
			out = append(out, fmt.Sprintf("%v/%d/%s", h.Kind, h.Fence, shortToken(h.Token)))
		}
	}
	return out
}
