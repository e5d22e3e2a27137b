package dashboard

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestChannelPattern(t *testing.T) {
	for _, tc := range []struct{ ns, want string }{
		{"lock", "lock:{*}:*released"},
		{"", "{*}:*released"},
		{"a*b?[c]\\", `a\*b\?\[c\]\\:{*}:*released`},
	} {
		if got := channelPattern(tc.ns); got != tc.want {
			t.Errorf("channelPattern(%q) = %q, want %q", tc.ns, got, tc.want)
		}
	}
	for _, tc := range []struct{ ns, want string }{
		{"lock", "lock:grants:*"},
		{"", "grants:*"},
		{"a*b", `a\*b:grants:*`},
	} {
		if got := grantChannelPattern(tc.ns); got != tc.want {
			t.Errorf("grantChannelPattern(%q) = %q, want %q", tc.ns, got, tc.want)
		}
	}
}

// diff tells a hand-off from a release, a release from an expiry (by the
// lease left at the look before), and says nothing of locks it did not
// look at.
func TestDiff(t *testing.T) {
	t0 := time.Unix(1000, 0)
	lock := func(key string, fence, ttlMs int64) Lock {
		return Lock{Key: key, Owner: fmt.Sprint("owner-", fence), Fence: fence, TTLMillis: ttlMs, Holds: 1}
	}
	mk := func(at time.Duration, names []string, n int, locks ...Lock) *look {
		return &look{at: t0.Add(at), names: names, n: n, locks: locks}
	}
	all := []string{"a", "b", "c", "d", "e", "f"}
	prev := mk(0, all, 6,
		lock("a", 1, 10_000), // released early
		lock("b", 2, 300),    // runs out
		lock("c", 3, 10_000), // passed on
		lock("d", 4, 200),    // runs out, taken again
		lock("e", 5, 10_000), // unchanged
		lock("f", 6, 300),    // runs out but a release message came
	)
	cur := mk(400*time.Millisecond, []string{"c", "d", "e", "g"}, 4,
		lock("c", 7, 10_000),
		lock("d", 8, 10_000),
		lock("e", 5, 9_600),
		lock("g", 9, 5_000), // new
	)
	var got []string
	for _, e := range diff(prev, cur, map[string]bool{"f": true}, false) {
		if !e.Time.Equal(cur.at) {
			t.Errorf("event %+v: time %v, want the look's %v", e, e.Time, cur.at)
		}
		got = append(got, fmt.Sprintf("%s %s %d<-%d", e.Kind, e.Key, e.Fence, e.PrevFence))
	}
	want := []string{
		"handoff c 7<-3",
		"expired d 4<-0", "acquired d 8<-0",
		"acquired g 9<-0",
		"released a 1<-0",
		"expired b 2<-0",
		"released f 6<-0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Names past MaxLocks (n) were not inspected: a lock there neither
	// appears nor goes.
	prev = mk(0, []string{"a", "b", "c"}, 1, lock("a", 1, 10_000))
	cur = mk(time.Second, []string{"a", "b", "c"}, 1, lock("a", 1, 9_000))
	prev.n, cur.n = 2, 1 // b was inspected (free) before; now only a is
	prev.locks = append(prev.locks, lock("b", 2, 10_000))
	cur.names = []string{"a", "b", "c"}
	if ev := diff(prev, cur, nil, false); len(ev) != 0 {
		t.Errorf("a lock past MaxLocks made events: %+v", ev)
	}
	back := mk(2*time.Second, []string{"a", "b", "c"}, 3, lock("a", 1, 8_000), lock("c", 3, 10_000))
	ev := diff(cur, back, nil, false)
	if len(ev) != 0 {
		t.Errorf("a lock that comes into view is not a new one: %+v", ev)
	}

	// After an outage, a lock gone may have gone with Redis's data.
	ev = diff(mk(0, []string{"a"}, 1, lock("a", 1, 10_000)), mk(time.Second, nil, 0), nil, true)
	if len(ev) != 1 || ev[0].Kind != EventReleased || !strings.Contains(ev[0].Text, "Redis was unreachable") {
		t.Errorf("after an outage: %+v", ev)
	}
}

// Rows of other kinds are told apart by their tokens: a permit taken and
// another gone are two events, never a hand-off; a release message on the
// semaphore's channel says its permits went by a release; the releases of
// a plain lock and of a read-write lock of the same name are another's.
func TestDiffKinds(t *testing.T) {
	t0 := time.Unix(1000, 0)
	hold := func(kind, token string, fence, ttlMs int64) Lock {
		return Lock{Key: "api", Kind: kind, Owner: token, Tokens: []string{token}, Fence: fence, TTLMillis: ttlMs, Holds: 1, Waiters: 2}
	}
	names := []string{"api"}
	prev := &look{at: t0, names: names, n: 1, locks: []Lock{
		hold("permit", "p1", 1, 300), // runs out, but released (message)
		hold("permit", "p2", 2, 10_000),
		hold("read", "r1", 1, 300), // runs out
	}}
	cur := &look{at: t0.Add(400 * time.Millisecond), names: names, n: 1, locks: []Lock{
		hold("permit", "p2", 2, 9_600),
		hold("permit", "p3", 3, 10_000),
	}}
	var got []string
	for _, e := range diff(prev, cur, map[string]bool{releaseGroup("permit", "api"): true, "api": true}, false) {
		got = append(got, fmt.Sprintf("%s %s %s %d: %s", e.Kind, e.HoldKind, e.Key, e.Fence, e.Text))
	}
	want := []string{
		"acquired permit api 3: permit taken with fence 3 by p3",
		"released permit api 1: permit released by p1 (fence 1), 0s before its lease would have ended",
		"expired read api 1: read lease of fence 1 ran out: r1 lost the lock (crashed, stalled or cut off: it did not renew in time)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := waitersOf(cur.locks); n != 2 {
		t.Errorf("waiters of two permits of one semaphore: %d, want its 2 once", n)
	}
	for channel, want := range map[string]string{
		"lock:{api}:released":     "api",
		"lock:{api}:sem:released": releaseGroup("permit", "api"),
		"lock:{api}:rw:released":  releaseGroup("write", "api"),
		"{a:b}:rw:released":       releaseGroup("read", "a:b"),
	} {
		if got, ok := releasedOf(channel); !ok || got != want {
			t.Errorf("releasedOf(%q) = %q, %v; want %q", channel, got, ok, want)
		}
	}
}

// holderOf prefers the identity, and shortens a bare owner token.
func TestHolderOf(t *testing.T) {
	tok := "0123456789abcdef0123"
	for _, tc := range []struct {
		l    Lock
		want string
	}{
		{Lock{Owner: tok, Tokens: []string{tok}, Identity: "web-1:42"}, "web-1:42"},
		{Lock{Owner: tok, Tokens: []string{tok}}, "01234567…"},
		{Lock{Owner: "billing-worker-with-a-long-name", Tokens: []string{tok}}, "billing-worker-with-a-long-name"},
	} {
		if got := holderOf(tc.l); got != tc.want {
			t.Errorf("holderOf(%+v) = %q, want %q", tc.l, got, tc.want)
		}
	}
}
