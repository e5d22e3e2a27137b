package fencelock

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Leader election, built on the lock: the leader is whoever holds the lock
// named electionLockPrefix + election, with the candidate's id as owner
// (WithOwner). Its fence is its term: strictly greater for every new
// leadership, so a resource that checks it refuses a deposed leader.

// electionLockPrefix is prefixed to an election's name to make the key of
// its lock.
const electionLockPrefix = "election:"

// Leadership is a won election: held, and renewed by the Client, until
// Resign or until it is lost. Its methods are safe for concurrent use.
type Leadership struct {
	election string
	id       string
	lk       *Lock
}

// Campaign waits until this candidate leads the election, then returns its
// Leadership, renewed every ttl/3 (unless opts say otherwise) until Resign
// or loss. It waits like Acquire, woken at once when the leader resigns,
// and keeps waiting through outages until ctx ends (unless opts set
// WithWait or WithMaxFailures). When ctx ends first, the error matches
// ctx.Err(), and ErrNotAcquired while another candidate leads (as for
// Acquire); after Close it matches ErrClosed.
//
// id names the candidate to the others (Leader.ID): a host name and process
// id, say. It must be unique among the candidates: a second candidate with
// the id of the leader gets an error matching ErrInvalidArgument, since the
// lock would otherwise let both lead.
func (c *Client) Campaign(ctx context.Context, election, id string, ttl time.Duration, opts ...AcquireOption) (*Leadership, error) {
	if c == nil {
		return nil, errNilClient
	}
	if ctx == nil {
		return nil, errNilContext
	}
	if election == "" {
		return nil, invalid("election", election, "must not be empty")
	}
	if id == "" {
		return nil, invalid("candidate id", id, "must not be empty")
	}
	if checkTTL(ttl) == nil {
		// Renew every ttl/3, and campaign until ctx ends: the caller's
		// options, later in the list, say otherwise.
		opts = append([]AcquireOption{WithAutoRenew(ttl / 3), WithMaxFailures(0)}, opts...)
	}
	// Observers watch the leadership without waiting for it: its
	// acquisition and its release must wake them too (driver.Request.Notify,
	// driver.ReleaseRequest.Notify).
	opts = append(opts[:len(opts):len(opts)], notifyWatchers()) // never into the caller's array
	lk, err := c.Acquire(WithOwner(ctx, id), electionLockPrefix+election, ttl, opts...)
	if err != nil {
		return nil, err
	}
	if lk.Holds() > 1 {
		// Re-entered the hold of a leader with the same id.
		lk.Release(ctx)
		return nil, invalid("candidate id", id, "is the id of the current leader of "+election+": every candidate needs an id of its own")
	}
	c.log.Info("fencelock: elected", "election", election, "id", id, "term", lk.Fence())
	return &Leadership{election: election, id: id, lk: lk}, nil
}

// Term returns the leadership's term: its lock's fencing token, strictly
// greater than every earlier leader's. Send it with every write a leader
// makes, so that the resource refuses a deposed leader's late writes.
func (l *Leadership) Term() int64 { return l.lk.Fence() }

// Done returns a channel that is closed when the leadership ends: resigned,
// or lost (renewal found it gone, or its lease deadline passed).
func (l *Leadership) Done() <-chan struct{} { return l.lk.Done() }

// Err returns nil while this candidate leads, then an error matching
// ErrLost or ErrReleased (after Resign), like Lock.Err.
func (l *Leadership) Err() error { return l.lk.Err() }

// Context returns a copy of ctx that is cancelled when the leadership ends,
// with its Err as the cause. Call cancel when done. It panics when ctx is
// nil, as context.WithCancel does.
func (l *Leadership) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	mustContext("Leadership.Context", ctx)
	return l.lk.Context(ctx)
}

// Lock returns the leadership's lock (Deadline, TTL, Refresh).
func (l *Leadership) Lock() *Lock { return l.lk }

// Resign ends the leadership: the lock is released, and the next candidate
// waiting in Campaign is woken at once. Errors are those of Lock.Release.
func (l *Leadership) Resign(ctx context.Context) error {
	err := l.lk.Release(ctx)
	if err == nil {
		l.lk.client.log.Info("fencelock: resigned", "election", l.election, "id", l.id, "term", l.lk.Fence())
	}
	return err
}

// Leader is the leader of an election as an observer sees it.
type Leader struct {
	// ID is the leader's candidate id; "" when the election has no leader.
	ID string
	// Term is the leader's term (its fence); 0 without a leader.
	Term int64
	// TTL is the leader's remaining lease when it was observed.
	TTL time.Duration
}

// Leader returns the current leader of the election (ID "" when there is
// none). It needs a store that can report a lock's holds (driver.Inspector;
// ErrUnsupported otherwise).
func (c *Client) Leader(ctx context.Context, election string) (Leader, error) {
	if c == nil {
		return Leader{}, errNilClient
	}
	if ctx == nil {
		return Leader{}, errNilContext
	}
	if election == "" {
		return Leader{}, invalid("election", election, "must not be empty")
	}
	info, err := c.Inspect(ctx, electionLockPrefix+election)
	return leaderOf(info), err
}

func leaderOf(info LockInfo) Leader {
	if !info.Held {
		return Leader{}
	}
	return Leader{ID: info.Owner, Term: info.Fence, TTL: info.TTL}
}

// maxObserveWait bounds how long Observe goes without looking: a lease that
// lapses sends no notification, and a notification can be lost. (A
// resignation sends one with any driver.Notifier, a new leader with one
// that delivers changes: Campaign sets driver.ReleaseRequest.Notify and
// driver.Request.Notify.) A variable for tests only.
var maxObserveWait = time.Second

// watchChanges watches key for Observe: its acquisitions and releases when
// the store delivers changes (acquisitions reports that), its releases
// alone when it refuses Changes.
func (c *Client) watchChanges(ctx context.Context, key string) (w *driver.Watch, acquisitions bool, err error) {
	if c.notify == nil {
		return nil, false, ErrUnsupported
	}
	req := driver.WatchRequest{Ref: c.ref(key, ""), Changes: true}
	w, err = c.notify.Watch(ctx, req)
	if !errors.Is(err, ErrUnsupported) {
		return w, err == nil, err
	}
	req.Changes = false // releases alone
	w, err = c.notify.Watch(ctx, req)
	if errors.Is(err, ErrUnsupported) {
		return nil, false, ErrUnsupported
	}
	return w, false, err
}

// Observe returns the leaders of the election as they change: the current
// one first (ID "" when there is none), then each new leader or term, and
// an empty Leader when the election is left without one. It ends when ctx
// ends or the loop breaks; it starts no goroutine.
//
// It looks again when a change is notified, when the leader's lease would
// end, and at least every second. With a backend that notifies changes
// (driver.WatchRequest.Changes: Redis, whose Campaign publishes its
// acquisitions and releases), Observe sees a new leader and a resignation at once, whether
// or not a candidate was waiting; with one that notifies releases only, a
// resignation at once and a new leader at its next look (within a second).
// A lease that lapses is seen when it ends. A backend error is yielded as
// it happens (Leader is then zero), and Observe goes on trying with a
// backoff. It needs a store that can report a lock's holds
// (driver.Inspector): without one it yields one error matching
// ErrUnsupported and ends.
func (c *Client) Observe(ctx context.Context, election string) iter.Seq2[Leader, error] {
	return func(yield func(Leader, error) bool) {
		if c == nil {
			yield(Leader{}, errNilClient)
			return
		}
		if ctx == nil {
			yield(Leader{}, errNilContext)
			return
		}
		if election == "" {
			yield(Leader{}, invalid("election", election, "must not be empty"))
			return
		}
		key := electionLockPrefix + election
		inspector, err := c.inspector("observe", key)
		if err != nil {
			yield(Leader{}, err)
			return
		}
		var changes <-chan struct{}
		w, acquisitionsNotified, err := c.watchChanges(ctx, key)
		if err == nil {
			defer w.Stop()
			changes = w.C
		}
		timer := time.NewTimer(maxObserveWait)
		defer timer.Stop()

		var last Leader
		first := true
		rounds := 0 // polls in a row without a leader, or failed
		for ctx.Err() == nil && !c.closed() {
			drain(changes) // this look covers every change notified so far
			info, err := c.inspect(ctx, inspector, key)
			var wait time.Duration
			switch {
			case err != nil && (ctx.Err() != nil || c.closed()):
				return // the end of the loop, not a failure to report
			case err != nil:
				if !yield(Leader{}, err) {
					return
				}
				rounds++
				wait = defaultRetry.Backoff(rounds)
			default:
				now := leaderOf(info)
				if first || now.ID != last.ID || now.Term != last.Term {
					if !yield(now, nil) {
						return
					}
					first, last = false, now
				}
				switch {
				case now.ID == "" && acquisitionsNotified:
					// A new leader is notified; the next look covers
					// a notification that was lost.
					rounds = 0
					wait = maxObserveWait
				case now.ID == "":
					// A new leader is not notified: look again soon,
					// then less often.
					rounds++
					wait = defaultRetry.Backoff(rounds)
				default:
					rounds = 0
					wait = now.TTL + time.Millisecond
				}
			}
			timer.Reset(min(max(wait, minRetryDelay), maxObserveWait))
			select {
			case <-ctx.Done():
				return
			case <-c.closeCtx.Done():
				return
			case <-changes:
			case <-timer.C:
			}
		}
	}
}
