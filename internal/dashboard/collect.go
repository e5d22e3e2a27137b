package dashboard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/lockscan"
	"github.com/fencelock/fencelock/redisbackend"
)

// Lock is one held lock as the page shows it.
type Lock struct {
	Key       string   `json:"key"`
	Owner     string   `json:"owner"`              // WithOwner's value, or the owner token
	Identity  string   `json:"identity,omitempty"` // WithIdentity's value, when the holder gave one
	Fence     int64    `json:"fence"`
	TTLMillis int64    `json:"ttl_ms"` // the lease left when the snapshot was taken (server PTTL)
	Holds     int      `json:"holds"`
	Tokens    []string `json:"tokens"`
	Waiters   int64    `json:"waiters"`
}

// Event kinds, as the page shows them.
const (
	EventAcquired = "acquired" // a free lock was taken
	EventHandoff  = "handoff"  // the fence changed between two looks: released (or forced) and taken again
	EventReleased = "released" // the lock went before its lease ran out
	EventExpired  = "expired"  // the lock went when its lease ran out: its holder did not renew (a lost lock)
)

// Event is one change seen between two snapshots.
type Event struct {
	Time      time.Time `json:"time"` // when the change was seen (it happened since the look before)
	Kind      string    `json:"kind"`
	Key       string    `json:"key"`
	Fence     int64     `json:"fence"`                // the fence that ended (released, expired) or began (acquired, handoff)
	PrevFence int64     `json:"prev_fence,omitempty"` // handoff: the fence before
	Holder    string    `json:"holder,omitempty"`     // the holder that took or left the lock (identity, else owner)
	Text      string    `json:"text"`
}

// Snapshot is what every browser is sent: the namespace's held locks and
// the recent events.
type Snapshot struct {
	Namespace string    `json:"namespace"`
	Time      time.Time `json:"time"` // when this snapshot was taken (or the last attempt, when Redis is unreachable)
	// Error is "" when Redis answered; otherwise why not, and Locks is
	// the last state seen (at LastOK, zero if never).
	Error  string    `json:"error,omitempty"`
	LastOK time.Time `json:"last_ok"`
	Total  int       `json:"total"` // lock keys found by SCAN (lockscan.Names: a key whose lease ended but is not yet gone counts)
	// More is how many lock keys were left out of Locks (and of the
	// events) to keep each look cheap: the first MaxLocks names in
	// sorted order are inspected.
	More    int     `json:"more"`
	Locks   []Lock  `json:"locks"`
	Waiters int64   `json:"waiters"` // sum over Locks
	Events  []Event `json:"events"`  // newest first
}

// channelPattern is the PSUBSCRIBE pattern of namespace's release
// channels (NS:{KEY}:released): the lock keys' pattern with the other
// suffix.
func channelPattern(namespace string) string {
	return strings.TrimSuffix(lockscan.Pattern(namespace), "lock") + "released"
}

// grantChannelPattern is the PSUBSCRIBE pattern of every process's own
// channel for its fair waiters of namespace (NS:grants:<random>), on which
// a release tells one of them that it was granted the lock.
func grantChannelPattern(namespace string) string {
	pattern := strings.TrimSuffix(lockscan.Pattern(namespace), "{*}:lock")
	return pattern + "grants:*"
}

// inspectConcurrency is how many Inspects (one pipelined round trip each)
// a look has in flight: enough to hide round-trip latency for a few hundred
// locks, few enough not to crowd out the Clients' own commands.
const inspectConcurrency = 8

// inspectAll inspects names with inspectConcurrency round trips in flight
// and returns the held ones, in the order of names. The first error ends
// the look: a partial table would show locks as released that are not.
func inspectAll(ctx context.Context, b *redisbackend.Backend, namespace string, names []string) ([]Lock, error) {
	infos := make([]redisbackend.LockInfo, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(inspectConcurrency, len(names)) {
		wg.Go(func() {
			for i := range next {
				infos[i], errs[i] = b.Inspect(ctx, namespace, names[i])
			}
		})
	}
	for i := range names {
		next <- i
	}
	close(next)
	wg.Wait()
	locks := make([]Lock, 0, len(names))
	for i, info := range infos {
		if errs[i] != nil {
			return nil, fmt.Errorf("inspecting %q: %w", names[i], errs[i])
		}
		if !info.Held {
			continue
		}
		locks = append(locks, Lock{
			Key: names[i], Owner: info.Owner, Identity: info.Identity, Fence: info.Fence,
			TTLMillis: info.TTL.Milliseconds(), Holds: info.Holds, Tokens: info.Tokens, Waiters: info.Waiters,
		})
	}
	return locks, nil
}

// expirySlack is how close to its lease's end a lock may go and still count
// as expired rather than released: the server's PTTL and this process's
// clock between two looks differ by a round trip or so.
const expirySlack = 50 * time.Millisecond

// look is one look at Redis.
type look struct {
	at    time.Time
	names []string // every lock key's name the scan found, sorted
	n     int      // names[:n] were inspected
	locks []Lock   // the held ones among names[:n], in order
}

// knows reports whether l knows if key was held: it was inspected, or it
// had no key at all. (A name past MaxLocks was not looked at.)
func (l *look) knows(key string) bool {
	i, found := slices.BinarySearch(l.names, key)
	return !found || i < l.n
}

// diff returns the events that explain how prev became cur, oldest first.
// released says which locks' release channels had a message in between:
// those went by a release even if their lease was about to end.
// afterOutage says Redis did not answer in between: a lock may then have
// gone with the server's data (a restart without persistence, a failover),
// and the events say so.
func diff(prev, cur *look, released map[string]bool, afterOutage bool) []Event {
	before := make(map[string]Lock, len(prev.locks))
	for _, l := range prev.locks {
		before[l.Key] = l
	}
	now := cur.at
	elapsed := now.Sub(prev.at)
	// ranOut: the lease seen at prev had ended by now, so a lock gone
	// (or changed hands) was lost by its holder, not released.
	ranOut := func(l Lock) bool {
		return !released[l.Key] && time.Duration(l.TTLMillis)*time.Millisecond <= elapsed+expirySlack
	}
	var events []Event
	add := func(kind string, l Lock, prevFence int64, text string) {
		if afterOutage && kind != EventAcquired {
			text += " (seen after Redis was unreachable: it may have lost its data)"
		}
		events = append(events, Event{Time: now, Kind: kind, Key: l.Key, Fence: l.Fence, PrevFence: prevFence, Holder: holderOf(l), Text: text})
	}
	acquired := func(l Lock) {
		add(EventAcquired, l, 0, fmt.Sprintf("taken with fence %d by %s", l.Fence, holderOf(l)))
	}
	expired := func(old Lock) {
		add(EventExpired, old, 0, fmt.Sprintf("lease of fence %d ran out: %s lost the lock (crashed, stalled or cut off: it did not renew in time)", old.Fence, holderOf(old)))
	}
	for _, l := range cur.locks {
		old, held := before[l.Key]
		delete(before, l.Key)
		switch {
		case !held && prev.knows(l.Key):
			acquired(l)
		case !held || old.Fence == l.Fence:
			// Not looked at before (past MaxLocks), or the same hold.
		case ranOut(old):
			expired(old)
			acquired(l)
		default:
			add(EventHandoff, l, old.Fence, fmt.Sprintf("passed on: fence %d → %d, %s → %s", old.Fence, l.Fence, holderOf(old), holderOf(l)))
		}
	}
	gone := make([]Lock, 0, len(before))
	for _, l := range before {
		if cur.knows(l.Key) {
			gone = append(gone, l)
		}
	}
	slices.SortFunc(gone, func(a, b Lock) int { return strings.Compare(a.Key, b.Key) })
	for _, old := range gone {
		if ranOut(old) {
			expired(old)
			continue
		}
		left := time.Duration(old.TTLMillis)*time.Millisecond - elapsed
		add(EventReleased, old, 0, fmt.Sprintf("released by %s (fence %d), %v before its lease would have ended", holderOf(old), old.Fence, max(left, 0).Round(time.Millisecond)))
	}
	return events
}

// holderOf names a lock's holder: its identity when it gave one, else its
// owner (WithOwner's value, or the owner token, shortened).
func holderOf(l Lock) string {
	if l.Identity != "" {
		return l.Identity
	}
	if len(l.Owner) > 12 && slices.Contains(l.Tokens, l.Owner) {
		return l.Owner[:8] + "…"
	}
	return l.Owner
}
