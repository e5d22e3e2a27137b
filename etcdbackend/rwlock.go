package etcdbackend

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Read-write locks (driver.KindRead and KindWrite), under their own prefix
// R = P "rw/" (apart from the lock and the semaphore of the same name):
//
//	R "h/" token   a hold on a lease of its own; value "w" or "r" (writer or
//	               reader) then the fence base; fence = base + create revision
//	R "i/" token   a waiting writer's intent, on a lease of its own (its place)
//	R "p/" token   a waiting reader's place, on a lease of its own
//	R "admit"      put by every writer's release: a reader's place created
//	               before its ModRevision is admitted (the readers that
//	               waited go in before the next writer), until it lapses
//	R "last"       the fence base (absent: 0), only ever raised
//	R "t/" token   tombstones
//
// As for semaphores, an acquire reads every key of R, decides as the Redis
// backend's script does, and writes on condition that no key of R was put
// since the read (deletions, by releases or lapsed leases, only ever let
// more callers in); a write that loses that race reads again.

// rwKeys are the keys of a read-write lock, and its places.
type rwKeys struct {
	keys            // holds, tombstones, fence base
	intents, places string
	admit           string
}

func rwKeysOf(namespace, key string) rwKeys {
	p := keysOf(namespace, key).prefix + "rw/"
	return rwKeys{
		keys:    keys{prefix: p, holds: p + "h/", last: p + "last"},
		intents: p + "i/",
		places:  p + "p/",
		admit:   p + "admit",
	}
}

func rwKeysFor(namespace, key string) keys { return rwKeysOf(namespace, key).keys }

// end is the end (exclusive) of the range of every key of the lock.
func (k rwKeys) end() string { return clientv3.GetPrefixRangeEnd(k.prefix) }

// rwState is a read of every key of a read-write lock.
type rwState struct {
	rev      int64 // the read's revision
	holds    []*mvccpb.KeyValue
	writer   *mvccpb.KeyValue // the writer's hold, if any
	intents  []*mvccpb.KeyValue
	admitted []*mvccpb.KeyValue // readers' places the last writer's release let in
	mine     *mvccpb.KeyValue   // the caller's hold
	intent   *mvccpb.KeyValue   // the caller's intent
	place    *mvccpb.KeyValue   // the caller's place
	tomb     bool
	base     int64
	last     *mvccpb.KeyValue
}

func (b *Backend) readRW(ctx context.Context, k rwKeys, token string) (*rwState, error) {
	resp, err := b.cli.Get(ctx, k.prefix, clientv3.WithRange(k.end()))
	if err != nil {
		return nil, err
	}
	s := &rwState{rev: resp.Header.Revision}
	var admitRev int64
	var places []*mvccpb.KeyValue
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		switch {
		case strings.HasPrefix(key, k.holds):
			s.holds = append(s.holds, kv)
			if strings.HasPrefix(string(kv.Value), "w") {
				s.writer = kv
			}
			if key == k.hold(token) {
				s.mine = kv
			}
		case strings.HasPrefix(key, k.intents):
			s.intents = append(s.intents, kv)
			if key == k.intents+token {
				s.intent = kv
			}
		case strings.HasPrefix(key, k.places):
			places = append(places, kv)
			if key == k.places+token {
				s.place = kv
			}
		case key == k.tombstone(token):
			s.tomb = true
		case key == k.admit:
			admitRev = kv.ModRevision
		case key == k.last:
			s.last = kv
			if s.base, err = parseBase(kv.Value); err != nil {
				return nil, err
			}
		}
	}
	for _, kv := range places {
		if kv.CreateRevision < admitRev {
			s.admitted = append(s.admitted, kv)
		}
	}
	return s, nil
}

// acquireRW is Acquire of a KindRead or KindWrite: a writer gets the lock when
// no hold and no admitted reader is live; a reader when it is admitted, or
// when no writer holds the lock and no writer's intent is live. A refused
// caller registers (or keeps, its lease renewed) its place for req.Place.
// A fresh hold costs a lease grant, a read and a conditional write.
func (b *Backend) acquireRW(ctx context.Context, req driver.Request) (_ driver.Result, err error) {
	defer func() { err = misconfigured(err) }() // the store refused the client: driver.ErrMisconfigured
	if err := checkRef(req.Ref); err != nil {
		return driver.Result{}, err
	}
	if req.Place < 0 {
		return driver.Result{}, &driver.InvalidArgumentError{Name: "place", Value: req.Place, Reason: "must not be negative"}
	}
	write := req.Kind == driver.KindWrite
	k := rwKeysOf(req.Namespace, req.Key)
	me := k.hold(req.Token)
	myPlace := k.places + req.Token
	if write {
		myPlace = k.intents + req.Token
	}
	secs := leaseSeconds(req.TTL)
	lease, placeLease, err := b.leasesFor(ctx, secs, myPlace, req.Place)
	if err != nil {
		return driver.Result{}, err
	}
	unused := func(keep clientv3.LeaseID) {
		if placeLease != 0 && placeLease != keep {
			b.revokeLater(placeLease)
		}
	}
	for range permitRaces {
		s, err := b.readRW(ctx, k, req.Token)
		if err != nil {
			b.revokeLater(lease.ID)
			unused(0)
			return driver.Result{}, fmt.Errorf("%w: reading the read-write lock: %w", driver.ErrNotSent, err)
		}
		// Every write is on condition that nothing was put since the read.
		unchanged := clientv3.Compare(clientv3.ModRevision(k.prefix), "<", s.rev+1).WithRange(k.end())
		leave := []clientv3.Op{clientv3.OpDelete(k.intents + req.Token), clientv3.OpDelete(k.places + req.Token)}

		if s.tomb {
			// A late copy of an acquire its client gave up: refused, and
			// its place goes.
			if _, err := b.cli.Txn(ctx).Then(leave...).Commit(); err != nil {
				b.revokeLater(lease.ID)
				unused(0)
				return driver.Result{}, err
			}
			b.revokeLater(lease.ID)
			unused(0)
			b.forgetPlace(myPlace)
			return driver.Result{HolderTTL: b.holderTTL(ctx, s.holds)}, nil
		}

		if s.mine != nil { // a retry: the same hold, on the new lease
			resp, err := b.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(me), "=", s.mine.CreateRevision)).
				Then(clientv3.OpPut(me, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease.ID))).
				Commit()
			if err != nil {
				b.revokeLater(lease.ID)
				unused(0)
				return driver.Result{}, err
			}
			if !resp.Succeeded {
				continue
			}
			if s.mine.Lease != int64(lease.ID) {
				b.revokeLater(clientv3.LeaseID(s.mine.Lease))
			}
			unused(0)
			base, err := parseBase(s.mine.Value[1:])
			if err != nil {
				return driver.Result{}, err
			}
			b.remember(me, holdLease{id: lease.ID, asked: secs})
			return driver.Result{Acquired: true, Fence: base + s.mine.CreateRevision, Holds: 1, Validity: validity(lease.TTL, req.TTL)}, nil
		}

		var grant bool
		var wait []*mvccpb.KeyValue // whose leases bound the wait when refused
		var waitEarliest bool
		conds := []clientv3.Cmp{unchanged}
		if write {
			grant = len(s.holds) == 0 && len(s.admitted) == 0
			wait = append(append(wait, s.holds...), s.admitted...)
		} else {
			admitted := false
			for _, kv := range s.admitted {
				if kv == s.place {
					admitted = true
					// The admission holds only while the place does.
					conds = append(conds, clientv3.Compare(clientv3.CreateRevision(myPlace), "=", kv.CreateRevision))
				}
			}
			grant = s.writer == nil && (admitted || len(s.intents) == 0)
			if s.writer != nil {
				wait = append(wait, s.writer)
			}
			wait, waitEarliest = append(wait, s.intents...), true
		}

		var ops []clientv3.Op
		if grant {
			base := s.base
			if req.FenceFloor > s.rev && req.FenceFloor > base {
				base = req.FenceFloor // fences from elsewhere: raise the base, never lower it
				ops = append(ops, clientv3.OpPut(k.last, padBase(base)))
			}
			kind := "r"
			if write {
				kind = "w"
			}
			ops = append(ops, clientv3.OpPut(me, kind+padBase(base), clientv3.WithLease(lease.ID)))
			ops = append(ops, leave...)
			resp, err := b.cli.Txn(ctx).If(conds...).Then(ops...).Commit()
			if err != nil {
				b.revokeLater(lease.ID)
				unused(0)
				return driver.Result{}, err
			}
			if !resp.Succeeded {
				continue
			}
			unused(0)
			if p, ok := b.placeOf(myPlace); ok {
				b.forgetPlace(myPlace)
				if p.lease != placeLease {
					b.revokeLater(p.lease)
				}
			}
			b.remember(me, holdLease{id: lease.ID, asked: secs})
			return driver.Result{Acquired: true, Fence: base + resp.Header.Revision, Holds: 1, Validity: validity(lease.TTL, req.TTL)}, nil
		}

		// Refused: register the place (if asked and not there yet).
		b.revokeLater(lease.ID)
		held := s.intent
		if !write {
			held = s.place
		}
		if placeLease != 0 && held == nil {
			resp, err := b.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(myPlace), "=", 0)).
				Then(clientv3.OpPut(myPlace, "", clientv3.WithLease(placeLease))).
				Commit()
			if err != nil {
				unused(0)
				return driver.Result{}, err
			}
			if resp.Succeeded {
				b.rememberPlace(myPlace, place{lease: placeLease, rev: resp.Header.Revision})
				held = &mvccpb.KeyValue{Lease: int64(placeLease)}
			}
		}
		if held != nil {
			unused(clientv3.LeaseID(held.Lease))
			if _, ok := b.placeOf(myPlace); !ok {
				b.rememberPlace(myPlace, place{lease: clientv3.LeaseID(held.Lease), rev: held.CreateRevision})
			}
		} else {
			unused(0)
		}
		if waitEarliest {
			return driver.Result{HolderTTL: b.earliestTTL(ctx, wait)}, nil
		}
		return driver.Result{HolderTTL: b.holderTTL(ctx, wait)}, nil
	}
	b.revokeLater(lease.ID)
	unused(0)
	return driver.Result{}, nil // overtaken every time: try again later
}

// leasesFor grants the hold's lease of secs and, for a caller that keeps a
// place (placeFor > 0), renews the lease of its known place or grants a
// new one, concurrently.
func (b *Backend) leasesFor(ctx context.Context, secs int64, placeKey string, placeFor time.Duration) (*clientv3.LeaseGrantResponse, clientv3.LeaseID, error) {
	known, ok := b.placeOf(placeKey)
	var lease *clientv3.LeaseGrantResponse
	var leaseErr error
	var placeLease clientv3.LeaseID
	var wg sync.WaitGroup
	wg.Go(func() { lease, leaseErr = b.cli.Grant(ctx, secs) })
	if placeFor > 0 {
		wg.Go(func() {
			if ok {
				if ttls, err := b.keepAlive(ctx, []clientv3.LeaseID{known.lease}); err == nil && ttls[known.lease] > 0 {
					placeLease = known.lease
					return
				}
			}
			if r, err := b.cli.Grant(ctx, leaseSeconds(placeFor)); err == nil {
				placeLease = r.ID
			}
		})
	}
	wg.Wait()
	if leaseErr != nil {
		if placeLease != 0 && placeLease != known.lease {
			b.revokeLater(placeLease)
		}
		return nil, 0, fmt.Errorf("%w: granting a lease of %ds: %w", driver.ErrNotSent, secs, leaseErr)
	}
	if placeFor > 0 && placeLease == 0 {
		b.revokeLater(lease.ID)
		return nil, 0, fmt.Errorf("%w: no lease for the place", driver.ErrNotSent)
	}
	return lease, placeLease, nil
}

// releaseRW is Release of a KindRead or KindWrite: it gives up the token's
// hold and withdraws its intent or place; the writer's release admits the
// readers then waiting. Remaining is 0.
func (b *Backend) releaseRW(ctx context.Context, req driver.ReleaseRequest) (_ driver.ReleaseResult, err error) {
	defer func() { err = misconfigured(err) }() // the store refused the client: driver.ErrMisconfigured
	if err := checkRef(req.Ref); err != nil {
		return driver.ReleaseResult{}, err
	}
	k := rwKeysOf(req.Namespace, req.Key)
	hold := k.hold(req.Token)
	var tomb []clientv3.Op
	if req.Tombstone > 0 {
		secs := leaseSeconds(req.Tombstone)
		lease, err := b.cli.Grant(ctx, secs)
		if err != nil {
			return driver.ReleaseResult{}, fmt.Errorf("%w: granting the tombstone's lease of %ds: %w", driver.ErrNotSent, secs, err)
		}
		tomb = append(tomb, clientv3.OpPut(k.tombstone(req.Token), "", clientv3.WithLease(lease.ID)))
	}
	leave := append([]clientv3.Op{clientv3.OpDelete(k.intents + req.Token), clientv3.OpDelete(k.places + req.Token)}, tomb...)
	// A writer's value starts with "w", a reader's with "r" (< "w").
	admit := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(hold), ">", "w")},
		[]clientv3.Op{clientv3.OpPut(k.admit, "")},
		nil)
	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(hold), ">", 0)).
		Then(append([]clientv3.Op{clientv3.OpDelete(hold, clientv3.WithPrevKV()), admit}, leave...)...).
		Else(leave...).
		Commit()
	if err != nil {
		return driver.ReleaseResult{}, err
	}
	b.forget(hold)
	for _, p := range []string{k.intents + req.Token, k.places + req.Token} {
		if pl, ok := b.placeOf(p); ok {
			b.forgetPlace(p)
			b.revokeLater(pl.lease)
		}
	}
	if !resp.Succeeded {
		return driver.ReleaseResult{}, nil
	}
	if prev := resp.Responses[0].GetResponseDeleteRange().PrevKvs; len(prev) == 1 && prev[0].Lease != 0 {
		b.revokeLater(clientv3.LeaseID(prev[0].Lease))
	}
	return driver.ReleaseResult{Held: true}, nil
}

// rwTTL is TTL of a KindRead or KindWrite, as lockTTL is of a lock.
func (b *Backend) rwTTL(ctx context.Context, ref driver.Ref) (_ time.Duration, err error) {
	defer func() { err = misconfigured(err) }() // the store refused the client: driver.ErrMisconfigured
	if err := checkRef(ref); err != nil {
		return 0, err
	}
	return b.ttl(ctx, rwKeysOf(ref.Namespace, ref.Key).hold(ref.Token))
}

// watchRW is Watch of a KindRead or KindWrite: it delivers, coalesced, every
// deletion of a hold, an intent or a place (releases, withdrawals, lapsed
// leases) and every writer's release (which admits the waiting readers).
// That is more often than a waiter can get in, which the contract allows.
func (b *Backend) watchRW(ctx context.Context, namespace, key string) (*driver.Watch, error) {
	if key == "" {
		return nil, &driver.InvalidArgumentError{Name: "key", Value: key, Reason: "must not be empty"}
	}
	k := rwKeysOf(namespace, key)
	return b.watchRange(ctx, k.prefix, k.end(), func(ev *clientv3.Event) bool {
		return ev.Type == clientv3.EventTypeDelete || string(ev.Kv.Key) == k.admit
	})
}
