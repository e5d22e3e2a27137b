package memorybackend

import (
	"maps"
	"slices"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// lockID names a lock: the same Key in two namespaces is two locks.
type lockID struct{ namespace, key string }

func idOf(ref driver.Ref) lockID { return lockID{ref.Namespace, ref.Key} }

// lock is the stored state of one lock. It is never deleted, so that its
// fence counter is never reset. Every access prunes it first: a hold or a
// tombstone whose end is not after now is gone.
type lock struct {
	owner      string // the holder's Owner; "" when free
	identity   string // the holder's Identity, set when it took the lock
	fence      int64  // the holder's fence; 0 when free
	counter    int64  // the last fence minted (0: none yet)
	holds      []hold // live holds, in the order they were taken
	tombstones map[string]time.Time
	// waited is set when an acquire was refused while the lock was held:
	// then a release must not hand it over (HandOff).
	waited bool
	// record is the last job tick claimed (jobtick.go).
	record tickRecord
}

// hold is one acquisition of the lock, with its own lease.
type hold struct {
	token string
	end   time.Time // the lease ends here
}

// prune drops lapsed holds and tombstones; with no hold left, the lock is
// free.
func (l *lock) prune(now time.Time) {
	l.holds = slices.DeleteFunc(l.holds, func(h hold) bool { return !h.end.After(now) })
	if len(l.holds) == 0 {
		l.owner, l.fence, l.identity, l.waited = "", 0, "", false
	}
	maps.DeleteFunc(l.tombstones, func(_ string, end time.Time) bool { return !end.After(now) })
	if !l.record.end.IsZero() && !l.record.end.After(now) {
		l.record = tickRecord{}
	}
}

// find returns the index of token's hold, or -1.
func (l *lock) find(token string) int {
	return slices.IndexFunc(l.holds, func(h hold) bool { return h.token == token })
}

// holderTTL is what a refused acquire reports: the latest live lease's
// remaining time (at least 1ms), or 0 when the lock is free.
func (l *lock) holderTTL(now time.Time) time.Duration {
	var last time.Time
	for _, h := range l.holds {
		if h.end.After(last) {
			last = h.end
		}
	}
	if len(l.holds) == 0 {
		return 0
	}
	return max(last.Sub(now), time.Millisecond)
}

func (l *lock) acquire(now time.Time, req driver.Request) driver.Result {
	l.prune(now)
	if _, ok := l.tombstones[req.Token]; ok {
		return driver.Result{HolderTTL: l.holderTTL(now)}
	}
	end := now.Add(req.TTL)
	switch {
	case len(l.holds) == 0:
		l.counter = max(l.counter, req.FenceFloor) + 1
		l.owner, l.fence, l.identity = req.Owner, l.counter, req.Identity
		l.holds = append(l.holds, hold{req.Token, end})
	case l.owner == req.Owner:
		if i := l.find(req.Token); i >= 0 {
			l.holds[i].end = end // a retry: no second hold
		} else {
			l.holds = append(l.holds, hold{req.Token, end}) // re-entry
		}
	default:
		l.waited = true
		return driver.Result{HolderTTL: l.holderTTL(now)}
	}
	return driver.Result{Acquired: true, Fence: l.fence, Holds: len(l.holds)}
}

// release drops token's hold, leaving a tombstone when asked. freed reports
// that the release freed the lock.
func (l *lock) release(now time.Time, req driver.ReleaseRequest) (res driver.ReleaseResult, freed bool) {
	l.prune(now)
	if req.Tombstone > 0 {
		end := now.Add(req.Tombstone)
		if old, ok := l.tombstones[req.Token]; !ok || end.After(old) {
			if l.tombstones == nil {
				l.tombstones = map[string]time.Time{}
			}
			l.tombstones[req.Token] = end
		}
	}
	i := l.find(req.Token)
	if i < 0 {
		return driver.ReleaseResult{}, false
	}
	l.holds = slices.Delete(l.holds, i, i+1)
	if len(l.holds) == 0 {
		l.owner, l.fence, l.identity, l.waited = "", 0, "", false
		return driver.ReleaseResult{Held: true}, true
	}
	return driver.ReleaseResult{Held: true, Remaining: len(l.holds)}, false
}

// renew sets token's lease to TTL from now, if the hold is live.
func (l *lock) renew(now time.Time, req driver.RenewRequest) bool {
	l.prune(now)
	i := l.find(req.Token)
	if i < 0 {
		return false
	}
	l.holds[i].end = now.Add(req.TTL)
	return true
}

// LockState is a snapshot of one lock, for assertions: see Backend.State.
type LockState struct {
	// Owner is the holder's Request.Owner; "" when the lock is free.
	Owner string
	// Fence is the holder's fencing token; 0 when the lock is free.
	Fence int64
	// LastFence is the last fencing token minted for the lock (0: none
	// yet). It outlives holds, releases and Delete: it is never reset.
	LastFence int64
	// Holds are the live holds, in the order they were taken. Empty when
	// the lock is free.
	Holds []Hold
	// Tombstones are the live release tombstones, sorted by token.
	Tombstones []Tombstone
}

// Held reports whether the lock has a live hold.
func (s LockState) Held() bool { return len(s.Holds) > 0 }

// Hold is one live hold of a lock.
type Hold struct {
	Token string
	TTL   time.Duration // the remaining lease, always positive
}

// Tombstone is a live release tombstone: an Acquire with Token is refused
// for TTL more.
type Tombstone struct {
	Token string
	TTL   time.Duration // the remaining time, always positive
}

// State returns a snapshot of the lock named by namespace and key, as of
// now: lapsed holds and tombstones are not in it. It is not a call: it is
// not counted, and faults and Pause do not affect it.
func (b *Backend) State(namespace, key string) LockState {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.locks[lockID{namespace, key}]
	if l == nil {
		return LockState{}
	}
	l.prune(now)
	s := LockState{Owner: l.owner, Fence: l.fence, LastFence: l.counter}
	for _, h := range l.holds {
		s.Holds = append(s.Holds, Hold{h.token, h.end.Sub(now)})
	}
	for _, tok := range slices.Sorted(maps.Keys(l.tombstones)) {
		s.Tombstones = append(s.Tombstones, Tombstone{tok, l.tombstones[tok].Sub(now)})
	}
	return s
}

// Delete frees the lock named by namespace and key at once, dropping every
// hold, as an operator's DEL of the lock or a failover to a replica that
// never saw it would. It keeps the fence counter (fences still increase)
// and the tombstones, and notifies no watcher (Redis publishes nothing on
// DEL). It reports whether the lock had a live hold. It is not a call: it
// is not counted, and faults and Pause do not affect it.
func (b *Backend) Delete(namespace, key string) bool {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.locks[lockID{namespace, key}]
	if l == nil {
		return false
	}
	l.prune(now)
	held := len(l.holds) > 0
	l.holds = nil
	l.owner, l.fence, l.identity = "", 0, ""
	return held
}

// ForgetFences sets the lock's fence counter back to last, as a store that
// lost its latest writes would have it: a replica promoted before the last
// acquisitions reached it, or a restart without persistence. Tests use it
// to check that fences still never go back (Request.FenceFloor).
func (b *Backend) ForgetFences(namespace, key string, last int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l := b.locks[lockID{namespace, key}]; l != nil {
		l.counter = last
	}
}
