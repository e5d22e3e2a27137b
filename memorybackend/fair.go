package memorybackend

import (
	"context"
	"slices"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// fairState is the Backend's lines of fair waiters (driver.Lines)
// and the watches of their turns. Guarded by Backend.mu.
type fairState struct {
	lines  map[lockID][]place
	turns  map[lockID]map[chan struct{}]string // watch channel → waiter token
	grants map[chan struct{}]driver.Grant      // announced to a watch, not yet taken
}

// place is one waiter's place in a line, with its lease.
type place struct {
	token string
	end   time.Time
	grant *grantTerms // nil: the waiter is woken, not granted the lock
}

// grantTerms are what a release needs to take the lock for a waiter
// (driver.Turn.Grant): its latest attempt's request, with the grant's
// lease as TTL, and that attempt's number.
type grantTerms struct {
	req driver.Request
	seq int64
}

// head drops the lapsed places at the head of id's line and returns the
// first live one ("" when the line is empty) and the end of its place.
func (f *fairState) head(id lockID, now time.Time) (string, time.Time) {
	line := f.lines[id]
	for len(line) > 0 && !line[0].end.After(now) {
		line = line[1:]
	}
	if len(line) == 0 {
		delete(f.lines, id)
		return "", time.Time{}
	}
	f.lines[id] = line
	return line[0].token, line[0].end
}

// leave removes token's place from id's line, and reports whether it had one.
func (f *fairState) leave(id lockID, token string) bool {
	line := f.lines[id]
	i := slices.IndexFunc(line, func(p place) bool { return p.token == token })
	if i < 0 {
		return false
	}
	f.lines[id] = slices.Delete(line, i, i+1)
	return true
}

// join puts token at the end of id's line, or renews its place.
func (f *fairState) join(id lockID, token string, end time.Time, grant *grantTerms) {
	if f.lines == nil {
		f.lines = map[lockID][]place{}
	}
	line := f.lines[id]
	if i := slices.IndexFunc(line, func(p place) bool { return p.token == token }); i >= 0 {
		line[i].end, line[i].grant = end, grant
		return
	}
	f.lines[id] = append(line, place{token, end, grant})
}

// headPlace returns the first place of id's line (after head dropped the
// lapsed ones).
func (f *fairState) headPlace(id lockID) place {
	return f.lines[id][0]
}

// wakeTurn notifies the watches of token's turn on id.
func (f *fairState) wakeTurn(id lockID, token string) {
	for c, t := range f.turns[id] {
		if t == token {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

// acquireInLine is AcquireInLine of a KindLock, with grants unless
// DisableGrants was called. It is subject to the faults and pauses of
// Acquire, and counted as an Acquire.
func (b *Backend) acquireInLine(ctx context.Context, req driver.Request, placeLease, grant time.Duration, seq int64) (driver.Result, error) {
	if b.noGrants || placeLease <= 0 {
		grant = 0
	}
	if grant != 0 {
		if err := checkTTL(grant); err != nil {
			return driver.Result{}, err
		}
		if grant > req.TTL || seq <= 0 {
			return driver.Result{}, &driver.InvalidArgumentError{Name: "grant", Value: grant, Reason: "must be at most the ttl, with a positive attempt number"}
		}
	}
	return b.acquireFair(ctx, req, placeLease, grant, seq)
}

func (b *Backend) acquireFair(ctx context.Context, req driver.Request, placeLease, grant time.Duration, seq int64) (driver.Result, error) {
	if err := checkRef(req.Ref); err != nil {
		return driver.Result{}, err
	}
	if req.Owner == "" {
		return driver.Result{}, &driver.InvalidArgumentError{Name: "owner", Value: req.Owner, Reason: "must not be empty"}
	}
	if err := checkTTL(req.TTL); err != nil {
		return driver.Result{}, err
	}
	if placeLease != 0 {
		if err := checkTTL(placeLease); err != nil {
			return driver.Result{}, err
		}
	}
	return do(b, ctx, Acquire, func(now time.Time) (driver.Result, error) {
		id := idOf(req.Ref)
		l := b.lockFor(id)
		l.prune(now)
		f := &b.fair
		if _, ok := l.tombstones[req.Token]; ok {
			f.leave(id, req.Token)
			return driver.Result{HolderTTL: l.holderTTL(now)}, nil
		}
		held := len(l.holds) > 0
		if held && l.owner == req.Owner {
			// Re-entry or retry: no line, and no place left in it to
			// hold the lock back, or be granted it, later.
			f.leave(id, req.Token)
			return l.acquire(now, req), nil
		}
		head, headEnd := f.head(id, now)
		if !held && (head == "" || head == req.Token) {
			f.leave(id, req.Token)
			res := l.acquire(now, req)
			b.acquiredLocked(id, req, res)
			return res, nil
		}
		if placeLease > 0 {
			var terms *grantTerms
			if grant > 0 {
				greq := req
				greq.TTL = grant
				terms = &grantTerms{req: greq, seq: seq}
			}
			f.join(id, req.Token, now.Add(placeLease), terms)
			if head == "" {
				head, headEnd = req.Token, now.Add(placeLease)
			}
		}
		if held {
			l.waited = true
			return driver.Result{HolderTTL: l.holderTTL(now)}, nil
		}
		// Free, and another waiter's turn: remind it.
		f.wakeTurn(id, head)
		return driver.Result{HolderTTL: max(headEnd.Sub(now), time.Millisecond)}, nil
	})
}

// watchTurn is Watch of a waiter in line (a Token), like watch: the
// channel gets a value when a release frees the lock with token first in
// line, or when the line is empty (every watcher of the lock is then
// woken).
func (b *Backend) watchTurn(ctx context.Context, namespace, key, token string) (*driver.Watch, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := lockID{namespace, key}
	c := make(chan struct{}, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	f := &b.fair
	if f.turns == nil {
		f.turns = map[lockID]map[chan struct{}]string{}
	}
	if f.turns[id] == nil {
		f.turns[id] = map[chan struct{}]string{}
	}
	f.turns[id][c] = token
	return driver.NewGrantWatch(c, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(f.turns[id], c)
		delete(f.grants, c)
		if len(f.turns[id]) == 0 {
			delete(f.turns, id)
		}
	}, func() (driver.Grant, bool) {
		b.mu.Lock()
		defer b.mu.Unlock()
		g, ok := f.grants[c]
		delete(f.grants, c)
		return g, ok
	}), nil
}

// afterRelease applies a release to the line of id and wakes who must be
// woken: a token that held nothing leaves the line; when the lock is free
// (freed now, or a waiter left), the first waiter in line is told, or,
// with an empty line and a lock freed now, every watcher. b.mu must be held.
func (b *Backend) afterRelease(id lockID, now time.Time, token string, held, freed bool) {
	f := &b.fair
	left := !held && f.leave(id, token)
	if !freed && !(left && len(b.lockFor(id).holds) == 0) {
		return
	}
	if head, _ := f.head(id, now); head != "" {
		if p := f.headPlace(id); p.grant != nil && !b.noGrants {
			// Take the lock for the waiter, and tell it.
			res := b.lockFor(id).acquire(now, p.grant.req)
			b.acquiredLocked(id, p.grant.req, res)
			f.leave(id, head)
			b.granted++
			if b.loseGrantNotices {
				return
			}
			for c, t := range f.turns[id] {
				if t == head {
					if f.grants == nil {
						f.grants = map[chan struct{}]driver.Grant{}
					}
					f.grants[c] = driver.Grant{Fence: res.Fence, Seq: p.grant.seq}
				}
			}
		}
		f.wakeTurn(id, head)
		return
	}
	if freed {
		b.notifyLocked(id)
		for c := range f.turns[id] {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

// DisableGrants makes the Backend's releases wake fair waiters instead of
// handing them the lock (AcquireInLine then ignores Turn.Grant).
func (b *Backend) DisableGrants() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.noGrants = true
}

// LoseGrantNotices makes releases that hand the lock to a fair waiter not
// tell it (as if the message were lost), or tell it again (lose false).
func (b *Backend) LoseGrantNotices(lose bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.loseGrantNotices = lose
}

// Grants returns how many times a release handed the lock to a fair waiter.
func (b *Backend) Grants() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.granted
}
