package dashboard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/cmd/internal/lockscan"
	"github.com/fencelock/fencelock/redisbackend"
)

// Lock is one row of the page: a held plain lock, or one hold of another
// kind (a permit of a semaphore, a read or the write hold of a read-write
// lock), each of which has a row of its own.
type Lock struct {
	Key       string   `json:"key"`
	Kind      string   `json:"kind"`               // "lock", "permit", "read" or "write" ("" is "lock")
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
	HoldKind  string    `json:"hold_kind,omitempty"`  // the row's Kind, when not the plain lock's
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
	Total  int       `json:"total"` // names with a key found by SCAN (lockscan.Names: a key whose lease ended but is not yet gone counts)
	// More is how many lock keys were left out of Locks (and of the
	// events) to keep each look cheap: the first MaxLocks names in
	// sorted order are inspected.
	More    int     `json:"more"`
	Locks   []Lock  `json:"locks"`
	Waiters int64   `json:"waiters"` // sum over Locks, each lock, semaphore or read-write lock once
	Events  []Event `json:"events"`  // newest first
}

// channelPattern is the PSUBSCRIBE pattern of namespace's release
// channels: NS:{KEY}:released, and NS:{KEY}:sem:released and
// NS:{KEY}:rw:released of semaphores and read-write locks.
func channelPattern(namespace string) string {
	return lockscan.ChannelPattern(namespace)
}

// grantChannelPattern is the PSUBSCRIBE pattern of every process's own
// channel for its fair waiters of namespace (NS:grants:<random>), on which
// a release tells one of them that it was granted the lock.
func grantChannelPattern(namespace string) string {
	return lockscan.NamespacePattern(namespace) + "grants:*"
}

// releasedOf returns the group (releaseGroup) whose release channel is
// channel, and false for another channel.
func releasedOf(channel string) (string, bool) {
	for _, c := range []struct{ suffix, kind string }{
		{"}:sem:released", "permit"}, {"}:rw:released", "read"}, {"}:released", "lock"},
	} {
		if name, ok := strings.CutSuffix(channel, c.suffix); ok {
			if i := strings.IndexByte(name, '{'); i >= 0 {
				return releaseGroup(c.kind, name[i+1:]), true
			}
		}
	}
	return "", false
}

// releaseGroup names the rows that share a release channel and waiters:
// the plain lock of key, the permits of its semaphore, or the holds of its
// read-write lock.
func releaseGroup(kind, key string) string {
	switch kind {
	case "", "lock":
		return key
	case "permit":
		return "permit\x00" + key
	}
	return "rw\x00" + key
}

// id is what makes a row the same row in two looks: the plain lock's name,
// or the kind, name and token of another kind's hold.
func (l Lock) id() string {
	if l.Kind == "" || l.Kind == "lock" {
		return l.Key
	}
	token := ""
	if len(l.Tokens) > 0 {
		token = l.Tokens[0]
	}
	return l.Kind + "\x00" + l.Key + "\x00" + token
}

// waitersOf is the number of waiters of locks: each group's once, although
// several of its rows show it (the permits of one semaphore).
func waitersOf(locks []Lock) int64 {
	seen := make(map[string]bool)
	var n int64
	for _, l := range locks {
		if g := releaseGroup(l.Kind, l.Key); !seen[g] {
			seen[g] = true
			n += l.Waiters
		}
	}
	return n
}

// inspectConcurrency is how many Inspects (one pipelined round trip each)
// a look has in flight: enough to hide round-trip latency for a few hundred
// locks, few enough not to crowd out the Clients' own commands.
const inspectConcurrency = 8

// inspectAll inspects names with inspectConcurrency round trips in flight
// and returns the held ones, in the order of names. The first error ends
// the look: a partial table would show locks as released that are not.
func inspectAll(ctx context.Context, b *redisbackend.Backend, namespace string, names []string) ([]Lock, error) {
	infos := make([]redisbackend.Inspection, len(names))
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
		if info.Held {
			tokens := make([]string, 0, len(info.Holds))
			for _, h := range info.Holds {
				tokens = append(tokens, h.Token)
			}
			locks = append(locks, Lock{
				Key: names[i], Kind: "lock", Owner: info.Owner, Identity: info.Identity, Fence: info.Fence,
				TTLMillis: info.TTL.Milliseconds(), Holds: len(info.Holds), Tokens: tokens, Waiters: info.Waiters,
			})
		}
		for _, h := range info.Others {
			l := Lock{Key: names[i], Owner: h.Token, Fence: h.Fence, TTLMillis: h.TTL.Milliseconds(), Holds: 1,
				Tokens: []string{h.Token}, Waiters: info.RW.Waiters}
			switch h.Kind {
			case fencelock.KindSemaphore:
				l.Kind, l.Waiters = "permit", info.Semaphore.Waiters
			case fencelock.KindWrite:
				l.Kind = "write"
			default:
				l.Kind = "read"
			}
			locks = append(locks, l)
		}
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
		before[l.id()] = l
	}
	now := cur.at
	elapsed := now.Sub(prev.at)
	// ranOut: the lease seen at prev had ended by now, so a lock gone
	// (or changed hands) was lost by its holder, not released.
	ranOut := func(l Lock) bool {
		return !released[releaseGroup(l.Kind, l.Key)] && time.Duration(l.TTLMillis)*time.Millisecond <= elapsed+expirySlack
	}
	var events []Event
	add := func(kind string, l Lock, prevFence int64, text string) {
		if afterOutage && kind != EventAcquired {
			text += " (seen after Redis was unreachable: it may have lost its data)"
		}
		ev := Event{Time: now, Kind: kind, Key: l.Key, Fence: l.Fence, PrevFence: prevFence, Holder: holderOf(l), Text: text}
		if l.Kind != "" && l.Kind != "lock" {
			ev.HoldKind, ev.Text = l.Kind, l.Kind+" "+text
		}
		events = append(events, ev)
	}
	acquired := func(l Lock) {
		add(EventAcquired, l, 0, fmt.Sprintf("taken with fence %d by %s", l.Fence, holderOf(l)))
	}
	expired := func(old Lock) {
		add(EventExpired, old, 0, fmt.Sprintf("lease of fence %d ran out: %s lost the lock (crashed, stalled or cut off: it did not renew in time)", old.Fence, holderOf(old)))
	}
	for _, l := range cur.locks {
		old, held := before[l.id()]
		delete(before, l.id())
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
	slices.SortFunc(gone, func(a, b Lock) int { return strings.Compare(a.id(), b.id()) })
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
