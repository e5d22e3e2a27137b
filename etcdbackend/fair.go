package etcdbackend

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The line of fair waiters (driver.WithFairness) is etcd's own recipe:
// each waiter puts a key P "q/" token on a lease of its own (its place), and
// the line's order is the keys' create revisions, which the cluster assigns
// in one total order. The free lock goes to the waiter whose key has the
// smallest create revision; a waiter that crashed or was paused loses its
// place when its lease ends. Each waiter watches only the key just before
// its own (watchTurn), so a release wakes the next waiter and no other.

// place is what a Backend remembers of a waiter's key in a line.
type place struct {
	lease clientv3.LeaseID
	rev   int64 // the key's create revision: its place in the line
}

// linePrefix and lineKey name the line of the lock with keys k.
func (k keys) line() string                { return k.prefix + "q/" }
func (k keys) lineEnd() string             { return clientv3.GetPrefixRangeEnd(k.line()) }
func (k keys) lineKey(token string) string { return k.line() + token }

// acquireFair is AcquireInLine without grants. The free lock is taken when
// the line is empty or req.Token's key is first in it; otherwise the token
// joins the line, or keeps its place (its lease is renewed), for place. It
// costs what Acquire does, with the place's lease renewed (or granted)
// alongside the hold's.
func (b *Backend) acquireFair(ctx context.Context, req driver.Request, placeFor time.Duration) (_ driver.Result, err error) {
	defer func() { err = misconfigured(err) }() // the store refused the client: driver.ErrMisconfigured
	if err := checkRef(req.Ref); err != nil {
		return driver.Result{}, err
	}
	if req.Owner == "" {
		return driver.Result{}, &driver.InvalidArgumentError{Name: "owner", Value: req.Owner, Reason: "must not be empty"}
	}
	if placeFor < 0 {
		return driver.Result{}, &driver.InvalidArgumentError{Name: "place", Value: placeFor, Reason: "must not be negative"}
	}
	k := keysOf(req.Namespace, req.Key)
	a := &fairAttempt{b: b, ctx: ctx, req: req, k: k, me: k.lineKey(req.Token), hold: k.hold(req.Token), secs: leaseSeconds(req.TTL)}
	a.known, a.inLine = b.placeOf(a.me)
	if err := a.grantLeases(placeFor); err != nil {
		return driver.Result{}, err
	}
	resp, err := a.txn(placeFor).Commit()
	if err != nil {
		b.revokeLater(a.lease.ID)
		return driver.Result{}, err
	}
	return a.outcome(resp)
}

// fairAttempt is one acquireFair: the caller's keys, its known place in
// line, and the leases granted for its hold and its place.
type fairAttempt struct {
	b          *Backend
	ctx        context.Context
	req        driver.Request
	k          keys
	me         string // the caller's key in the line
	hold       string // the caller's hold
	known      place  // the caller's place, if inLine
	inLine     bool
	secs       int64
	lease      *clientv3.LeaseGrantResponse
	placeLease clientv3.LeaseID
}

// grantLeases grants the hold's lease and, for a caller that keeps a place
// (placeFor > 0), renews the known place's lease or grants a new one,
// concurrently.
func (a *fairAttempt) grantLeases(placeFor time.Duration) error {
	b, ctx := a.b, a.ctx
	var leaseErr error
	var wg sync.WaitGroup
	wg.Go(func() { a.lease, leaseErr = b.cli.Grant(ctx, a.secs) })
	if placeFor > 0 {
		wg.Go(func() { a.placeLease = a.placeLeaseFor(placeFor) })
	}
	wg.Wait()
	if leaseErr != nil {
		return fmt.Errorf("%w: granting a lease of %ds: %w", driver.ErrNotSent, a.secs, leaseErr)
	}
	if placeFor > 0 && a.placeLease == 0 {
		b.revokeLater(a.lease.ID)
		return fmt.Errorf("%w: no lease for the place in line", driver.ErrNotSent)
	}
	return nil
}

// placeLeaseFor returns the known place's lease, renewed, or a new one of
// placeFor (0: neither could be had).
func (a *fairAttempt) placeLeaseFor(placeFor time.Duration) clientv3.LeaseID {
	b, known := a.b, a.known
	if a.inLine {
		if ttls, err := b.keepAlive(a.ctx, []clientv3.LeaseID{known.lease}); err == nil && ttls[known.lease] > 0 {
			return known.lease
		}
	}
	if r, err := b.cli.Grant(a.ctx, leaseSeconds(placeFor)); err == nil {
		return r.ID
	}
	return 0
}

// txn is acquireFair's one transaction: unless the token is tombstoned, the
// free lock is taken when the line is empty or the token is first in it,
// the held lock re-entered by its owner; otherwise the token joins the line
// (or keeps its place), and the line's head and the holds are read.
func (a *fairAttempt) txn(placeFor time.Duration) clientv3.Txn {
	k, me, req, known := a.k, a.me, a.req, a.known
	put := clientv3.OpPut(a.hold, req.Owner, clientv3.WithLease(a.lease.ID), clientv3.WithPrevKV())
	getLast := clientv3.OpGet(k.last)
	noHolds := clientv3.Compare(clientv3.CreateRevision(k.holds), "=", 0).WithRange(k.holdsEnd())
	allOwners := clientv3.Compare(clientv3.Value(k.holds), "=", req.Owner).WithRange(k.holdsEnd())
	lineEmpty := clientv3.Compare(clientv3.CreateRevision(k.line()), "=", 0).WithRange(k.lineEnd())
	take := []clientv3.Op{mint(k, req.FenceFloor, a.lease.Revision), put, getLast, clientv3.OpDelete(me)}
	// first: this token's key is the one known, and no key of the line is
	// older. Unknown (not in line yet): never first.
	first := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(me), "=", -1)}
	if a.inLine {
		first = []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(me), "=", known.rev),
			clientv3.Compare(clientv3.CreateRevision(k.line()), ">", known.rev-1).WithRange(k.lineEnd()),
		}
	}
	var join []clientv3.Op
	if placeFor > 0 {
		join = append(join, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(me), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(me, req.Owner, clientv3.WithLease(a.placeLease))},
			nil))
	}
	join = append(join,
		clientv3.OpGet(me),
		clientv3.OpGet(k.line(), clientv3.WithRange(k.lineEnd()), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1)),
		clientv3.OpGet(k.holds, clientv3.WithRange(k.holdsEnd())))

	return a.b.cli.Txn(a.ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k.tombstone(req.Token)), "=", 0)).
		Then(clientv3.OpTxn(
			[]clientv3.Cmp{noHolds},
			[]clientv3.Op{clientv3.OpTxn( // free: whose turn?
				[]clientv3.Cmp{lineEmpty},
				take,
				[]clientv3.Op{clientv3.OpTxn(first, take, join)})},
			[]clientv3.Op{clientv3.OpTxn( // held: re-entry (leaving the line), or wait in line
				[]clientv3.Cmp{allOwners},
				[]clientv3.Op{put, getLast, clientv3.OpGet(k.holds, clientv3.WithRange(k.holdsEnd()), clientv3.WithCountOnly()), clientv3.OpDelete(me)},
				join)},
		)).
		Else(clientv3.OpDelete(me), clientv3.OpGet(k.holds, clientv3.WithRange(k.holdsEnd()))) // tombstoned: leave the line too
}

// outcome reads the transaction's branches: tombstoned, taken (free, with
// an empty line or the token first), re-entered, or waiting in line.
func (a *fairAttempt) outcome(resp *clientv3.TxnResponse) (driver.Result, error) {
	b := a.b
	if !resp.Succeeded {
		b.revokeLater(a.lease.ID)
		a.unusedPlace(0)
		b.forgetPlace(a.me)
		return driver.Result{HolderTTL: b.holderTTL(a.ctx, resp.Responses[1].GetResponseRange().Kvs)}, nil
	}
	state := resp.Responses[0].GetResponseTxn()
	turn := state.Responses[0].GetResponseTxn()
	if state.Succeeded { // free
		if turn.Succeeded { // an empty line
			return a.taken(turn)
		}
		mineFirst := turn.Responses[0].GetResponseTxn()
		if mineFirst.Succeeded {
			return a.taken(mineFirst)
		}
		return a.waiting(mineFirst.Responses), nil
	}
	if turn.Succeeded { // re-entry (or a retry of this token)
		return a.reentered(turn)
	}
	return a.waiting(turn.Responses), nil
}

// unusedPlace gives back a place lease that no key of the line uses.
func (a *fairAttempt) unusedPlace(used clientv3.LeaseID) {
	if a.placeLease != 0 && a.placeLease != used {
		a.b.revokeLater(a.placeLease)
	}
}

// taken: the free lock is the caller's, and its place in line is gone.
func (a *fairAttempt) taken(r *pb.TxnResponse) (driver.Result, error) {
	b := a.b
	fence, err := fenceOf(r.Responses[2].GetResponseRange())
	if err != nil {
		return driver.Result{}, err
	}
	b.remember(a.hold, holdLease{id: a.lease.ID, asked: a.secs})
	b.forgetPlace(a.me)
	a.unusedPlace(0)
	if a.inLine && a.known.lease != a.placeLease {
		b.revokeLater(a.known.lease)
	}
	return driver.Result{Acquired: true, Fence: fence, Holds: 1, Validity: validity(a.lease.TTL, a.req.TTL)}, nil
}

// reentered: the owner re-entered the lock it holds.
func (a *fairAttempt) reentered(turn *pb.TxnResponse) (driver.Result, error) {
	b := a.b
	if prev := turn.Responses[0].GetResponsePut().PrevKv; prev != nil && clientv3.LeaseID(prev.Lease) != a.lease.ID {
		b.revokeLater(clientv3.LeaseID(prev.Lease))
	}
	// Its place, if it had one, is gone with the re-entry: it must not
	// hold the line up once the lock is free.
	b.forgetPlace(a.me)
	a.unusedPlace(0)
	fence, err := fenceOf(turn.Responses[1].GetResponseRange())
	if err != nil {
		return driver.Result{}, err
	}
	b.remember(a.hold, holdLease{id: a.lease.ID, asked: a.secs})
	holds := int(turn.Responses[2].GetResponseRange().Count)
	return driver.Result{Acquired: true, Fence: fence, Holds: holds, Validity: validity(a.lease.TTL, a.req.TTL)}, nil
}

// waiting reads the line after a refusal: remembers this token's place and
// works out HolderTTL.
func (a *fairAttempt) waiting(ops []*pb.ResponseOp) driver.Result {
	b := a.b
	b.revokeLater(a.lease.ID)
	n := len(ops)
	mine, head, holds := ops[n-3].GetResponseRange().Kvs, ops[n-2].GetResponseRange().Kvs, ops[n-1].GetResponseRange().Kvs
	if len(mine) == 1 {
		b.rememberPlace(a.me, place{lease: clientv3.LeaseID(mine[0].Lease), rev: mine[0].CreateRevision})
		a.unusedPlace(clientv3.LeaseID(mine[0].Lease))
	} else {
		a.unusedPlace(0)
	}
	if len(holds) > 0 {
		return driver.Result{HolderTTL: b.holderTTL(a.ctx, holds)}
	}
	return driver.Result{HolderTTL: b.holderTTL(a.ctx, head)} // free: the first waiter's place
}

// watchTurn is Watch of a waiter in a line (a Token): it watches the key just
// before token's in the line, and, once token is first, the lock's holds.
// C receives a value when the lock is free and token is first in line, and
// when a watch ended (a value may have been missed); not when the lock goes
// to another waiter. A token not (or no longer) in line is told when a
// hold is released, as by watchReleases.
func (b *Backend) watchTurn(ctx context.Context, namespace, key, token string) (*driver.Watch, error) {
	if key == "" || token == "" {
		return nil, &driver.InvalidArgumentError{Name: "key and token", Value: key + "/" + token, Reason: "must not be empty"}
	}
	k := keysOf(namespace, key)
	c := make(chan struct{}, 1)
	notify := func() {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ready := make(chan struct{})
	var readyOnce sync.Once
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wctx.Err() == nil {
			ok := b.awaitTurnStep(wctx, k, token, notify, func() { readyOnce.Do(func() { close(ready) }) })
			if !ok && wctx.Err() == nil {
				notify() // a read or a watch failed: a turn may have gone unseen
				select {
				case <-wctx.Done():
				case <-time.After(rewatchDelay):
				}
			}
		}
	}()
	select {
	case <-ready:
	case <-ctx.Done():
	case <-time.After(watchReady):
	}
	var stopOnce sync.Once
	return driver.NewWatch(c, func() {
		stopOnce.Do(func() {
			cancel()
			<-done
		})
	}), nil
}

// awaitTurnStep reads the line and waits for the one event that can change
// token's turn: the deletion of the key just before its own, or, when it is
// first, of a hold. It notifies when token is first and the lock is free.
// It reports false when a read or a watch failed.
func (b *Backend) awaitTurnStep(ctx context.Context, k keys, token string, notify, ready func()) bool {
	me := k.lineKey(token)
	resp, err := b.cli.Txn(ctx).Then(
		clientv3.OpGet(me),
		clientv3.OpGet(k.line(), clientv3.WithRange(k.lineEnd()), clientv3.WithKeysOnly()),
		clientv3.OpGet(k.holds, clientv3.WithRange(k.holdsEnd()), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return false
	}
	rev := resp.Header.Revision
	mine := resp.Responses[0].GetResponseRange().Kvs
	held := resp.Responses[2].GetResponseRange().Count > 0
	var before *mvccpb.KeyValue
	if len(mine) == 1 {
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			if kv.CreateRevision < mine[0].CreateRevision && (before == nil || kv.CreateRevision > before.CreateRevision) {
				before = kv
			}
		}
	}
	var from, to string
	switch {
	case before != nil: // wait for the waiter ahead to go (its turn, its lapse, its giving up)
		from, to = string(before.Key), ""
	default: // first in line (or not in line): wait for a release
		if !held && len(mine) == 1 {
			notify()
		}
		from, to = k.holds, k.holdsEnd()
	}
	opts := []clientv3.OpOption{clientv3.WithRev(rev + 1), clientv3.WithFilterPut(), clientv3.WithCreatedNotify()}
	if to != "" {
		opts = append(opts, clientv3.WithRange(to))
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for r := range b.cli.Watch(wctx, from, opts...) {
		if r.Created {
			ready()
		}
		if r.Err() != nil || r.Canceled {
			return false
		}
		if len(r.Events) > 0 {
			if before == nil && len(mine) == 0 {
				notify() // not in line: every release is news
			}
			return true
		}
	}
	return ctx.Err() != nil
}

func (b *Backend) rememberPlace(key string, p place) {
	b.mu.Lock()
	b.places[key] = p
	b.mu.Unlock()
}

func (b *Backend) forgetPlace(key string) {
	b.mu.Lock()
	delete(b.places, key)
	b.mu.Unlock()
}

func (b *Backend) placeOf(key string) (place, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.places[key]
	return p, ok
}
