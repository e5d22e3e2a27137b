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
	k := rwKeysOf(req.Namespace, req.Key)
	a := &rwAttempt{b: b, ctx: ctx, req: req, k: k, me: k.hold(req.Token), myPlace: k.places + req.Token, secs: leaseSeconds(req.TTL)}
	if req.Kind == driver.KindWrite {
		a.myPlace = k.intents + req.Token
	}
	a.lease, a.placeLease, err = b.leasesFor(ctx, a.secs, a.myPlace, req.Place)
	if err != nil {
		return driver.Result{}, err
	}
	for range permitRaces {
		s, err := b.readRW(ctx, k, req.Token)
		if err != nil {
			return a.fail(fmt.Errorf("%w: reading the read-write lock: %w", driver.ErrNotSent, err))
		}
		res, raced, err := a.try(s)
		if !raced {
			return res, err
		}
	}
	b.revokeLater(a.lease.ID)
	a.unused(0)
	return driver.Result{}, nil // overtaken every time: try again later
}

// rwAttempt is one AcquireRW: the caller's keys and the leases granted for
// its hold and its place.
type rwAttempt struct {
	b          *Backend
	ctx        context.Context
	req        driver.Request
	k          rwKeys
	me         string // the hold's key
	myPlace    string // the place's key: an intent for a writer
	secs       int64
	lease      *clientv3.LeaseGrantResponse
	placeLease clientv3.LeaseID
}

// unused revokes the place's lease unless the place keeps it.
func (a *rwAttempt) unused(keep clientv3.LeaseID) {
	if a.placeLease != 0 && a.placeLease != keep {
		a.b.revokeLater(a.placeLease)
	}
}

// fail revokes both leases and returns err.
func (a *rwAttempt) fail(err error) (driver.Result, error) {
	a.b.revokeLater(a.lease.ID)
	a.unused(0)
	return driver.Result{}, err
}

// try acts on the state s read: raced is true when a conditional write
// found the lock changed since, and AcquireRW reads it again.
func (a *rwAttempt) try(s *rwState) (res driver.Result, raced bool, err error) {
	if s.tomb {
		res, err = a.refuseTombstoned(s)
		return res, false, err
	}
	if s.mine != nil {
		return a.retry(s)
	}
	grant, wait, waitEarliest, conds := a.judge(s)
	if grant {
		return a.grant(s, conds)
	}
	res, err = a.refuse(s, wait, waitEarliest)
	return res, false, err
}

// leave are the writes that remove the caller's place and intent.
func (a *rwAttempt) leave() []clientv3.Op {
	return []clientv3.Op{clientv3.OpDelete(a.k.intents + a.req.Token), clientv3.OpDelete(a.k.places + a.req.Token)}
}

// refuseTombstoned refuses a late copy of an acquire its client gave up;
// its place goes.
func (a *rwAttempt) refuseTombstoned(s *rwState) (driver.Result, error) {
	if _, err := a.b.cli.Txn(a.ctx).Then(a.leave()...).Commit(); err != nil {
		return a.fail(err)
	}
	a.b.revokeLater(a.lease.ID)
	a.unused(0)
	a.b.forgetPlace(a.myPlace)
	return driver.Result{HolderTTL: a.b.holderTTL(a.ctx, s.holds)}, nil
}

// retry moves the caller's hold, of an earlier attempt, to the new lease.
func (a *rwAttempt) retry(s *rwState) (_ driver.Result, raced bool, _ error) {
	b := a.b
	resp, err := b.cli.Txn(a.ctx).
		If(clientv3.Compare(clientv3.CreateRevision(a.me), "=", s.mine.CreateRevision)).
		Then(clientv3.OpPut(a.me, "", clientv3.WithIgnoreValue(), clientv3.WithLease(a.lease.ID))).
		Commit()
	if err != nil {
		res, err := a.fail(err)
		return res, false, err
	}
	if !resp.Succeeded {
		return driver.Result{}, true, nil
	}
	if s.mine.Lease != int64(a.lease.ID) {
		b.revokeLater(clientv3.LeaseID(s.mine.Lease))
	}
	a.unused(0)
	base, err := parseBase(s.mine.Value[1:])
	if err != nil {
		return driver.Result{}, false, err
	}
	b.remember(a.me, holdLease{id: a.lease.ID, asked: a.secs})
	return driver.Result{Acquired: true, Fence: base + s.mine.CreateRevision, Holds: 1, Validity: validity(a.lease.TTL, a.req.TTL)}, false, nil
}

// judge decides whether s grants the caller the lock, on the conditions
// conds (every write is on condition that nothing was put since the read),
// and, when it does not, whose leases bound the wait (the earliest of
// them to end, for a reader, the latest for a writer).
func (a *rwAttempt) judge(s *rwState) (grant bool, wait []*mvccpb.KeyValue, waitEarliest bool, conds []clientv3.Cmp) {
	k := a.k
	conds = []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k.prefix), "<", s.rev+1).WithRange(k.end())}
	if a.req.Kind == driver.KindWrite {
		grant = len(s.holds) == 0 && len(s.admitted) == 0
		wait = append(append(wait, s.holds...), s.admitted...)
		return grant, wait, false, conds
	}
	admitted := false
	for _, kv := range s.admitted {
		if kv == s.place {
			admitted = true
			// The admission holds only while the place does.
			conds = append(conds, clientv3.Compare(clientv3.CreateRevision(a.myPlace), "=", kv.CreateRevision))
		}
	}
	grant = s.writer == nil && (admitted || len(s.intents) == 0)
	if s.writer != nil {
		wait = append(wait, s.writer)
	}
	return grant, append(wait, s.intents...), true, conds
}

// grant writes the caller's hold, on conditions conds, raising the fence
// base to the request's floor if that is above it.
func (a *rwAttempt) grant(s *rwState, conds []clientv3.Cmp) (_ driver.Result, raced bool, _ error) {
	b, req := a.b, a.req
	var ops []clientv3.Op
	base := s.base
	if req.FenceFloor > s.rev && req.FenceFloor > base {
		base = req.FenceFloor // fences from elsewhere: raise the base, never lower it
		ops = append(ops, clientv3.OpPut(a.k.last, padBase(base)))
	}
	kind := "r"
	if req.Kind == driver.KindWrite {
		kind = "w"
	}
	ops = append(ops, clientv3.OpPut(a.me, kind+padBase(base), clientv3.WithLease(a.lease.ID)))
	ops = append(ops, a.leave()...)
	resp, err := b.cli.Txn(a.ctx).If(conds...).Then(ops...).Commit()
	if err != nil {
		res, err := a.fail(err)
		return res, false, err
	}
	if !resp.Succeeded {
		return driver.Result{}, true, nil
	}
	a.unused(0)
	if p, ok := b.placeOf(a.myPlace); ok {
		b.forgetPlace(a.myPlace)
		if p.lease != a.placeLease {
			b.revokeLater(p.lease)
		}
	}
	b.remember(a.me, holdLease{id: a.lease.ID, asked: a.secs})
	return driver.Result{Acquired: true, Fence: base + resp.Header.Revision, Holds: 1, Validity: validity(a.lease.TTL, req.TTL)}, false, nil
}

// refuse refuses the caller: it registers its place (if asked and not
// there yet) and says how long the holders in wait may keep it waiting.
func (a *rwAttempt) refuse(s *rwState, wait []*mvccpb.KeyValue, waitEarliest bool) (driver.Result, error) {
	b := a.b
	b.revokeLater(a.lease.ID)
	held := s.intent
	if a.req.Kind != driver.KindWrite {
		held = s.place
	}
	if a.placeLease != 0 && held == nil {
		resp, err := b.cli.Txn(a.ctx).
			If(clientv3.Compare(clientv3.CreateRevision(a.myPlace), "=", 0)).
			Then(clientv3.OpPut(a.myPlace, "", clientv3.WithLease(a.placeLease))).
			Commit()
		if err != nil {
			a.unused(0)
			return driver.Result{}, err
		}
		if resp.Succeeded {
			b.rememberPlace(a.myPlace, place{lease: a.placeLease, rev: resp.Header.Revision})
			held = &mvccpb.KeyValue{Lease: int64(a.placeLease)}
		}
	}
	if held != nil {
		a.unused(clientv3.LeaseID(held.Lease))
		if _, ok := b.placeOf(a.myPlace); !ok {
			b.rememberPlace(a.myPlace, place{lease: clientv3.LeaseID(held.Lease), rev: held.CreateRevision})
		}
	} else {
		a.unused(0)
	}
	if waitEarliest {
		return driver.Result{HolderTTL: b.earliestTTL(a.ctx, wait)}, nil
	}
	return driver.Result{HolderTTL: b.holderTTL(a.ctx, wait)}, nil
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
