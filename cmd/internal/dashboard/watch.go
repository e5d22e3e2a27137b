package dashboard

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock/cmd/internal/lockscan"
)

// lookTimeout bounds one look at Redis: a server that stopped answering
// (not one that refuses connections, which fails at once) is reported
// after it.
const lookTimeout = 5 * time.Second

// downRetry is the pause between looks while Redis does not answer.
const downRetry = time.Second

// minGap is the least time between two looks when release messages ask for
// one: a burst of releases makes one look, not one each.
const minGap = 50 * time.Millisecond

// settle is how long after a release message the look comes: the message
// also wakes the lock's waiters, and a look a moment later usually sees
// the one that took the lock (a hand-off) rather than the lock free.
const settle = 25 * time.Millisecond

// watch looks at Redis every Interval, and soon after a release message,
// and publishes each look, until ctx is done. It owns the pattern
// subscription and its goroutine, and stops both before it returns.
func (d *Dashboard) watch(ctx context.Context) {
	var (
		mu       sync.Mutex
		released = make(map[string]bool) // locks with a release message since the last look
		trigger  = make(chan struct{}, 1)
	)
	// The subscription reconnects by itself (go-redis resubscribes after
	// an outage), so it is made once; until it works, the looks every
	// Interval still see everything, a little later.
	ps := d.rdb.PSubscribe(ctx, channelPattern(d.opts.Namespace), grantChannelPattern(d.opts.Namespace))
	var wg sync.WaitGroup
	defer wg.Wait() // after ps.Close below: Close ends the range
	defer ps.Close()
	msgs := ps.Channel()
	wg.Go(func() {
		for m := range msgs {
			// NS:{KEY}:released (and :sem:released, :rw:released)
			// carries "released" when a hold was freed, "next:TOKEN" when
			// a fair waiter's turn came; a process's own channel
			// NS:grants:ID, the grant of a lock to one of its fair
			// waiters (a look finds out which).
			if m.Payload == "released" {
				if group, ok := releasedOf(m.Channel); ok {
					mu.Lock()
					released[group] = true
					mu.Unlock()
				}
			}
			select {
			case trigger <- struct{}{}:
			default:
			}
		}
	})

	var (
		prev      *look // the last look that worked
		events    []Event
		lastStart time.Time
		nextAt    time.Time // when timer fires
		down      bool      // the last look failed
		missed    bool      // a look failed since prev
	)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-trigger:
			// Look soon, but not sooner than minGap after the last; and
			// never later than planned, or a stream of messages would
			// put the look off for ever.
			if soon := max(settle, time.Until(lastStart.Add(minGap))); time.Now().Add(soon).Before(nextAt) {
				nextAt = time.Now().Add(soon)
				timer.Reset(soon)
			}
			continue
		case <-timer.C:
		}
		lastStart = time.Now()
		mu.Lock()
		rel := released
		released = make(map[string]bool)
		mu.Unlock()

		cur, total, err := d.look(ctx)
		if ctx.Err() != nil {
			return
		}
		snap := Snapshot{Namespace: d.opts.Namespace, Time: time.Now(), Locks: []Lock{}}
		if err != nil {
			if !down {
				d.log.Warn("fencelock dashboard: Redis unreachable; retrying", "err", err)
				down = true
			}
			missed = true
			snap.Error = "Redis unreachable: " + err.Error()
			if prev != nil {
				snap.LastOK, snap.Locks = prev.at, prev.locks
				snap.Total, snap.More = len(prev.names), len(prev.names)-prev.n
			}
		} else {
			if down {
				d.log.Info("fencelock dashboard: Redis answers again")
				down = false
			}
			if prev != nil {
				events = append(events, diff(prev, cur, rel, missed)...)
			}
			prev, missed = cur, false
			snap.LastOK, snap.Locks = cur.at, cur.locks
			snap.Total, snap.More = total, total-cur.n
		}
		// events is kept oldest first for appending; the page wants the
		// newest first.
		if len(events) > d.opts.MaxEvents {
			events = slices.Delete(events, 0, len(events)-d.opts.MaxEvents)
		}
		snap.Events = make([]Event, len(events))
		copy(snap.Events, events)
		slices.Reverse(snap.Events)
		snap.Waiters = waitersOf(snap.Locks)
		d.publish(snap)

		next := d.opts.Interval
		if took := time.Since(lastStart); took > next {
			next = took // a slow look: give Redis as long a rest
		}
		if err != nil {
			next = max(next, downRetry)
		}
		nextAt = time.Now().Add(next)
		timer.Reset(next)
	}
}

// look scans the namespace and inspects the first MaxLocks names. total
// is how many lock keys the scan found.
func (d *Dashboard) look(ctx context.Context) (*look, int, error) {
	ctx, cancel := context.WithTimeout(ctx, lookTimeout)
	defer cancel()
	names, err := lockscan.Names(ctx, d.rdb, d.opts.Namespace)
	if err != nil {
		return nil, 0, err
	}
	n := min(len(names), d.opts.MaxLocks)
	locks, err := inspectAll(ctx, d.backend, d.opts.Namespace, names[:n])
	if err != nil {
		return nil, 0, err
	}
	return &look{at: time.Now(), names: names, n: n, locks: locks}, len(names), nil
}
