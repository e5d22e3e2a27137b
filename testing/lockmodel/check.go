package lockmodel

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// The invariants, checked after every step.

// check checks the model against the holders and the store.
func (m *machine) check() {
	m.t.Helper()
	if m.failed {
		return
	}
	// In real time the store is read first, then the holders: a holder
	// still not told afterwards was not told when the store was read.
	now := time.Now()
	views := map[resource]View{}
	for _, r := range m.resources {
		if v, ok := m.store.View(r.fam, r.key); ok {
			views[r] = v
		}
	}
	after := time.Now()
	m.observeHolders(now)
	m.checkClosed()
	believers := m.checkStoreHolds(after, views)
	m.checkExclusion(believers)
	m.checkForced(after)
	m.checkOrphans(after, views)
	m.checkLiveness(after, views)
}

// observeHolders notes which holders were told of their lock's end. In
// virtual time, a holder not told when its local deadline has passed
// means the Client's keeper is late, and Err must agree with Done.
func (m *machine) observeHolders(now time.Time) {
	for _, h := range m.holdings {
		if h.told() {
			continue
		}
		told := h.ctx.Err() != nil
		if m.virtual {
			// (A holder that released its lock, or closed its Client, is
			// told when the release is confirmed.)
			if !told && !h.released && !h.cl.closing && !now.Before(h.lk.Deadline()) {
				m.fail("%s is not told at its local deadline (%v)", h, m.since(h.lk.Deadline()))
				return
			}
			if (h.lk.Err() != nil) != told {
				m.fail("%s: Err %v, but its Context done: %v", h, h.lk.Err(), told)
				return
			}
		}
		if told {
			h.toldAt, h.cause = now, context.Cause(h.ctx)
			m.note("%s told: %v", h, h.cause)
		}
	}
}

// checkClosed checks that a closed Client has no call in flight and every
// lock of it was told of its end.
func (m *machine) checkClosed() {
	for _, c := range slices.Clone(m.calls) {
		if c.cl.closed && c.start.Before(c.cl.closeStart) && !m.virtual {
			m.await(c, 10*time.Second) // it returns as soon as it is scheduled
		}
	}
	m.calls = slices.DeleteFunc(m.calls, func(c *call) bool { return !c.end.IsZero() })
	for _, c := range m.calls {
		// (Close waits for the calls in progress when it is called; one
		// made meanwhile may go on.)
		if c.cl.closed && c.start.Before(c.cl.closeStart) {
			m.fail("%s is still in flight after Close of its Client returned", c.what)
			return
		}
	}
	for _, h := range m.holdings {
		if h.cl.closed && !h.told() {
			m.fail("%s is not told of its end after Close of its Client returned", h)
			return
		}
	}
}

// believes reports whether h's holder believes it holds its lock: not told
// of an end, not released by its holder (nor by Close), not released by
// token or by force (its own Client tells it at once, another only at its
// next renewal: checkForced), and its local deadline not passed (in real
// time, less the tolerance of the clocks: see realSlack).
func (m *machine) believes(h *holding) bool {
	return m.believesAt(h, time.Now())
}

func (m *machine) believesAt(h *holding, now time.Time) bool {
	if h.told() || h.ctx.Err() != nil || h.released || h.forced() || h.cl.closing {
		return false
	}
	deadline := h.lk.Deadline()
	if !m.virtual {
		deadline = deadline.Add(-m.realSlack(h))
	}
	return now.Before(deadline)
}

// realSlack is how much earlier than its local deadline a holder stops
// counting as a believer in real time: the safety margin once more. The
// check compares the holder's deadline, computed by the Client from before
// it sent the request, with the time the store was read, and another
// holder's acquisition, which the store made only after the first lease
// ended; on one machine the store's clock and the Client's run together,
// so scheduling delays, however long on a busy machine, cannot make two
// holders overlap there. The slack covers the clocks (the store's wall
// clock against the monotonic one) and is a tenth of the lease.
func (m *machine) realSlack(h *holding) time.Duration {
	return time.Duration(float64(h.ttl) * safetyMargin)
}

// checkStoreHolds checks that every believer has a live hold on the store
// whose lease ends no earlier than the believer's local deadline, and
// returns the believers by lock.
func (m *machine) checkStoreHolds(now time.Time, views map[resource]View) map[resource][]*holding {
	believers := map[resource][]*holding{}
	for _, h := range m.holdings {
		if !m.believesAt(h, now) {
			continue
		}
		if v, ok := views[h.r]; ok {
			i := slices.IndexFunc(v.Holds, func(x Hold) bool { return x.Token == h.token })
			switch {
			case i < 0:
				if !m.holdGone(h, now) {
					return nil
				}
				continue // released by token or by force
			case h.r.fam == FamRW && v.Holds[i].Write != h.write:
				m.fail("%s is a write hold %v on the store", h, v.Holds[i].Write)
				return nil
			case m.virtual && v.Holds[i].End.Before(h.lk.Deadline()):
				m.fail("%s: its lease on the store ends at %v, before its local deadline %v",
					h, m.since(v.Holds[i].End), m.since(h.lk.Deadline()))
				return nil
			}
		}
		believers[h.r] = append(believers[h.r], h)
		m.stats["believer "+h.r.fam.String()]++
	}
	return believers
}

// holdGone accounts for a believer whose hold is not on the store: a
// ReleaseToken or ForceRelease took it (the holder learns of it at its
// next renewal). It reports false, having failed the check, otherwise.
func (m *machine) holdGone(h *holding, now time.Time) bool {
	var spared *call // a ForceRelease that must not have released h
	var by *call     // the call that released h, or may have
	// lenient: a release by c leaves h to learn of it at its next renewal.
	lenient := func(c *call) bool { return c.cl != h.cl || c.end.IsZero() }
	for _, c := range m.forces[h.r] {
		if !c.end.IsZero() && c.end.Before(h.start) {
			continue // over before h was asked for
		}
		switch {
		case c.token != "":
			if c.token != h.token {
				continue
			}
		case c.before != nil && !c.before.AnyHeld():
			continue // found nothing to release
		case c.before != nil && !sawHold(*c.before, h):
			// Taken during the call (after the holds it saw): not its
			// to release.
			spared = c
			continue
		}
		// Released by c (or maybe by c: it failed, or is in flight).
		// When several calls may have released it, the one whose Client
		// need not tell the holder at once is blamed: a call of the
		// holder's own Client that failed may have released nothing.
		if by == nil || (!lenient(by) && lenient(c)) {
			by = c
		}
	}
	if by != nil {
		m.markForced(h, by)
		return true
	}
	if spared != nil {
		m.fail("%s is gone from the store: %s released it, though it was taken during the call (the call found %+v)",
			h, spared.what, *spared.before)
		return false
	}
	m.fail("%s believes it holds the lock, but its hold is gone from the store", h)
	return false
}

// checkExclusion checks that at most one owner believes it holds a lock,
// at most Permits a semaphore, and a writer alone a read-write lock.
func (m *machine) checkExclusion(believers map[resource][]*holding) {
	for _, r := range m.resources {
		bs := believers[r]
		switch r.fam {
		case FamLock:
			owners := map[string]bool{}
			for _, b := range bs {
				owners[b.owner] = true
			}
			if len(owners) > 1 {
				m.fail("%d owners believe they hold %s: %s", len(owners), r, list(bs))
				return
			}
		case FamSem:
			if len(bs) > m.tg.Permits {
				m.fail("%d holders believe they hold one of the %d permits of %s: %s", len(bs), m.tg.Permits, r, list(bs))
				return
			}
		case FamRW:
			writers := 0
			for _, b := range bs {
				if b.write {
					writers++
				}
			}
			if writers > 1 || (writers == 1 && len(bs) > 1) {
				m.fail("a writer does not hold %s alone: %s", r, list(bs))
				return
			}
		}
	}
}

func list(hs []*holding) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%s (deadline %v)", h, time.Until(h.lk.Deadline()).Round(time.Microsecond)))
	}
	return strings.Join(parts, "; ")
}

// checkForced checks that a holder whose hold was released by token or by
// force is told: at once when its own Client released it, and by the end
// of its next renewal otherwise (without faults).
func (m *machine) checkForced(now time.Time) {
	for _, h := range m.holdings {
		if h.forcer == nil || h.told() || h.ctx.Err() != nil {
			continue
		}
		if h.released {
			continue // its holder's own release is in flight: told when it returns
		}
		c := h.forcer
		if c.end.IsZero() {
			continue // in flight: the bound counts from its end
		}
		from := latest(h.forcedAt, c.end)
		slack := exactSlack
		if !m.virtual {
			slack = m.tg.Tolerance
		}
		switch {
		case c.cl == h.cl && !h.forcedUnseen && !now.Before(c.end.Add(slackIf(!m.virtual, slack))):
			// Whatever it returned: its Client released the hold, or may
			// have, and has the Lock.

			m.fail("%s was released by %s of its own Client, but not told", h, c.what)
			return
		case c.cl != h.cl && h.renew > 0 && m.clientQuiet(h.cl, from) && m.clientQuiet(h.cl, now) &&
			now.Sub(from) > h.renew+slack:
			m.fail("%s was released by %s at %v, but not told within its renewal interval %v",
				h, c.what, m.since(from), h.renew)
			return
		}
	}
}

func slackIf(real bool, d time.Duration) time.Duration {
	if real {
		return d
	}
	return 0
}

// checkOrphans checks that a hold no live holder owns ends no later than
// the lease its owner last gave it: a hold of a holder told of its end, of
// a call that returned without the lock, or of a closed Client.
func (m *machine) checkOrphans(now time.Time, views map[resource]View) {
	longest := m.longest()
	for _, r := range m.resources {
		v, ok := views[r]
		if !ok {
			continue
		}
		slack := m.maxLag + exactSlack
		if !m.virtual {
			slack += m.tg.Tolerance
		}
		if r.fam == FamLock {
			slack += driver.PlaceLease // a fair waiter that gave up may be granted the lock
		}
		for _, x := range v.Holds {
			var bound time.Time
			var whose string
			if h := m.byToken[x.Token]; h != nil {
				if !h.told() {
					continue
				}
				bound, whose = h.toldAt.Add(h.maxTTL+slack), h.String()
			} else {
				name := x.Token[:max(strings.LastIndexByte(x.Token, '-'), 0)]
				if m.inFlight(name, r) {
					continue
				}
				last, ok := m.lastCallEnd[name+"|"+r.String()]
				if !ok {
					continue // the operator's or an unknown caller's; nothing to bound it by
				}
				bound, whose = last.Add(longest+slack), "a hold of "+name+" that no call returned"
			}
			if x.End.After(bound) {
				m.fail("%s of %s: its lease on the store ends at %v, after %v, when no one owns it", whose, r,
					m.since(x.End), m.since(bound))
				return
			}
		}
	}
}

// inFlight reports whether the client named name has a call about r in
// flight.
func (m *machine) inFlight(name string, r resource) bool {
	return slices.ContainsFunc(m.calls, func(c *call) bool { return c.cl.name == name && c.r == r })
}

// checkLiveness checks that a waiter gets a free lock within its bound,
// and at once after a release with no fault.
func (m *machine) checkLiveness(now time.Time, views map[resource]View) {
	for _, r := range m.resources {
		v, ok := views[r]
		if !ok {
			continue
		}
		changed := v.Counter != m.lastCounter[r]
		m.lastCounter[r] = v.Counter
		for _, c := range m.calls {
			if c.r != r || !c.waiting {
				continue
			}
			m.stats["waiter checked"]++
			bound, ok := m.eligible(c, v, now)
			if !ok {
				c.eligibleSince = time.Time{}
				continue
			}
			m.stats["eligible waiter seen"]++
			if c.eligibleSince.IsZero() || changed {
				c.eligibleSince = now
			}
			if waited := now.Sub(c.eligibleSince); waited > bound {
				m.fail("%s has waited %v for %s, which is free (bound %v)", c.what, waited, r, bound)
				return
			}
		}
	}
	if !m.virtual {
		return
	}
	// A release with no fault frees the lock for its waiters at once: a
	// waiter of the same Client gets it handed over, or woken; a waiter of
	// another is woken by the store.
	for _, rel := range m.released {
		if rel.end.IsZero() || !rel.end.Equal(now) || !m.clientQuiet(rel.cl, rel.start) {
			continue
		}
		for _, r := range m.resources {
			v, ok := views[r]
			if !ok {
				continue
			}
			if r.fam == FamRW || (rel.r.key != "" && rel.r != r) {
				continue
			}
			for _, c := range m.calls {
				if c.r != r || !c.waiting {
					continue
				}
				m.stats["waiter after a release"]++
				// A waiter whose bound is longer may stand behind the
				// place of a waiter that is cut off or gone (fair and
				// read-write lines): the bound above covers it.
				if bound, ok := m.eligible(c, v, now); ok && bound <= exactSlack {
					m.fail("%s released %s, but %s, waiting, did not get it at once", rel.what, r, c.what)
					return
				}
			}
		}
	}
}

// eligible reports whether waiter c can take r now, and within what
// bound: not cancelled, its Client open and not holding r itself, its wait
// not over, no fault, and room on the store.
func (m *machine) eligible(c *call, v View, now time.Time) (bound time.Duration, ok bool) {
	if c.cancelled || c.cl.closing || !m.clientQuiet(c.cl, now) || (!c.until.IsZero() && !now.Before(c.until)) {
		return 0, false
	}
	// A waiter's fallback timer is cut at the lease the store last told
	// it of: it attempts when that lease ends, and so gets a lock whose
	// holder's lease lapsed at once, unless the lease was shortened since
	// (then within a fallback poll).
	bound = exactSlack
	if last, ok := m.shortened[c.r]; ok && now.Sub(last) <= m.longest()+fallbackPoll {
		bound = fallbackPoll + exactSlack
	}
	if c.r.fam == FamLock && c.owner != "" && c.r.key == jobKey {
		bound = fallbackPoll + exactSlack // RunJob's waiters use the default, jittered, strategy
	}
	switch c.r.fam {
	case FamLock:
		if len(v.Holds) > 0 {
			return 0, false
		}
		for _, h := range m.holdings {
			if h.cl == c.cl && h.r == c.r && !h.told() && h.ctx.Err() == nil {
				return 0, false // its own Client holds it: its waiters wait for that hold's end
			}
		}
		if c.fair {
			bound = fallbackPoll + exactSlack + driver.PlaceLease // a place of a waiter gone holds the line up
		}
	case FamSem:
		if len(v.Holds) >= m.tg.Permits {
			return 0, false
		}
	case FamRW:
		if c.write && len(v.Holds) > 0 {
			return 0, false
		}
		if !c.write {
			if slices.ContainsFunc(v.Holds, func(x Hold) bool { return x.Write }) {
				return 0, false
			}
			if slices.ContainsFunc(m.calls, func(w *call) bool { return w.r == c.r && w.write && w.waiting && !w.cancelled }) {
				return 0, false // a writer waits: readers wait behind it
			}
		}
		bound = fallbackPoll + exactSlack + driver.PlaceLease // places of waiters gone
	}
	if !m.virtual {
		bound = 2*bound + m.tg.Tolerance
	}
	return bound, true
}

// longest is the longest lease a lock of the check may have.
func (m *machine) longest() time.Duration {
	longest := m.tg.Job.LockAtMost
	for _, ttl := range m.tg.TTLs {
		longest = max(longest, ttl)
	}
	return longest
}
