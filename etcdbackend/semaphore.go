package etcdbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Semaphores (driver.KindSemaphore). A semaphore's permits are holds
// under P "s/h/" (P is the lock's prefix, so the semaphore is apart from the
// lock of the same name), each on a lease of its own; tombstones under
// P "s/t/". A permit's value is the fence base at its acquisition, and its
// fence is that base plus the permit key's create revision. The base is
// kept in P "s/last" (absent: 0) and only ever raised, by a FenceFloor
// above the cluster's revision.
//
// etcd cannot count keys inside a transaction, so an acquire reads the
// live permits and then writes its own on condition that no permit was
// added since the read (every key of the range has a ModRevision at most
// the read's revision; a permit that went away meanwhile only leaves more
// room). A write that loses that race reads again, a few times at most.

// semKeysOf are the keys of the semaphore named by namespace and key.
func semKeysOf(namespace, key string) keys {
	p := keysOf(namespace, key).prefix + "s/"
	return keys{prefix: p, holds: p + "h/", last: p + "last"}
}

// permitRaces bounds the read-and-write rounds of one acquirePermit that
// other acquires keep overtaking.
const permitRaces = 5

// acquirePermit is Acquire of a KindSemaphore: it takes a permit
// when fewer than req.Permits are live. A fresh permit costs three round
// trips (a lease grant, a read, a conditional write); a retry with a token
// that holds a permit moves it to the new lease, keeping its fence.
func (b *Backend) acquirePermit(ctx context.Context, req driver.Request) (_ driver.Result, err error) {
	defer func() { err = misconfigured(err) }() // the store refused the client: driver.ErrMisconfigured
	if err := checkRef(req.Ref); err != nil {
		return driver.Result{}, err
	}
	if req.Permits < 1 {
		return driver.Result{}, &driver.InvalidArgumentError{Name: "semaphore permits", Value: req.Permits, Reason: "must be at least 1"}
	}
	k := semKeysOf(req.Namespace, req.Key)
	me, tomb := k.hold(req.Token), k.tombstone(req.Token)
	secs := leaseSeconds(req.TTL)
	lease, err := b.cli.Grant(ctx, secs)
	if err != nil {
		return driver.Result{}, fmt.Errorf("%w: granting a lease of %ds: %w", driver.ErrNotSent, secs, err)
	}
	acquired := func(fence int64) (driver.Result, error) {
		b.remember(me, holdLease{id: lease.ID, asked: secs})
		return driver.Result{Acquired: true, Fence: fence, Holds: 1, Validity: validity(lease.TTL, req.TTL)}, nil
	}
	for range permitRaces {
		read, err := b.cli.Txn(ctx).Then(
			clientv3.OpGet(k.holds, clientv3.WithRange(k.holdsEnd())),
			clientv3.OpGet(k.last),
			clientv3.OpGet(tomb, clientv3.WithCountOnly()),
		).Commit()
		if err != nil {
			b.revokeLater(lease.ID)
			return driver.Result{}, fmt.Errorf("%w: reading the permits: %w", driver.ErrNotSent, err)
		}
		permits := read.Responses[0].GetResponseRange().Kvs
		if read.Responses[2].GetResponseRange().Count > 0 {
			b.revokeLater(lease.ID)
			return driver.Result{HolderTTL: b.earliestTTL(ctx, permits)}, nil
		}
		var mine *mvccpb.KeyValue
		for _, kv := range permits {
			if string(kv.Key) == me {
				mine = kv
			}
		}
		if mine != nil {
			// A retry: the same permit, on the new lease.
			resp, err := b.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(me), "=", mine.CreateRevision),
					clientv3.Compare(clientv3.CreateRevision(tomb), "=", 0)).
				Then(clientv3.OpPut(me, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease.ID))).
				Commit()
			if err != nil {
				b.revokeLater(lease.ID)
				return driver.Result{}, err
			}
			if !resp.Succeeded {
				continue
			}
			if mine.Lease != int64(lease.ID) {
				b.revokeLater(clientv3.LeaseID(mine.Lease))
			}
			base, err := parseBase(mine.Value)
			if err != nil {
				return driver.Result{}, err
			}
			return acquired(base + mine.CreateRevision)
		}
		if len(permits) >= req.Permits {
			b.revokeLater(lease.ID)
			return driver.Result{HolderTTL: b.earliestTTL(ctx, permits)}, nil
		}

		// Room for one more: write it, unless a permit came meanwhile.
		rev := read.Header.Revision
		lastKVs := read.Responses[1].GetResponseRange().Kvs
		var base int64
		sameBase := clientv3.Compare(clientv3.CreateRevision(k.last), "=", 0)
		if len(lastKVs) == 1 {
			if base, err = parseBase(lastKVs[0].Value); err != nil {
				return driver.Result{}, err
			}
			sameBase = clientv3.Compare(clientv3.ModRevision(k.last), "=", lastKVs[0].ModRevision)
		}
		ops := []clientv3.Op{}
		// The write's revision is above rev: a floor above rev (fences from
		// elsewhere) raises the base, and with it every later fence.
		if req.FenceFloor > rev && req.FenceFloor > base {
			base = req.FenceFloor
			ops = append(ops, clientv3.OpPut(k.last, padBase(base)))
		}
		ops = append(ops, clientv3.OpPut(me, padBase(base), clientv3.WithLease(lease.ID)))
		resp, err := b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(tomb), "=", 0),
				clientv3.Compare(clientv3.CreateRevision(me), "=", 0),
				clientv3.Compare(clientv3.ModRevision(k.holds), "<", rev+1).WithRange(k.holdsEnd()),
				sameBase).
			Then(ops...).
			Commit()
		if err != nil {
			b.revokeLater(lease.ID)
			return driver.Result{}, err
		}
		if resp.Succeeded {
			return acquired(base + resp.Header.Revision)
		}
	}
	// Overtaken every time: a busy semaphore. Not held; the waiter tries
	// again on its timer or on the next release.
	b.revokeLater(lease.ID)
	return driver.Result{}, nil
}

// earliestTTL is the HolderTTL of a refused permit: an upper bound of when
// the earliest permit's lease ends (0 when unknown).
func (b *Backend) earliestTTL(ctx context.Context, permits []*mvccpb.KeyValue) time.Duration {
	leases := make([]clientv3.LeaseID, 0, len(permits))
	for _, kv := range permits {
		leases = append(leases, clientv3.LeaseID(kv.Lease))
	}
	var earliest time.Duration
	for _, t := range b.timeToLive(ctx, leases) {
		if t.ttl < 0 {
			continue
		}
		if d := min(time.Duration(t.ttl+1)*time.Second, time.Duration(t.granted)*time.Second); earliest == 0 || d < earliest {
			earliest = d
		}
	}
	return earliest
}

// releasePermit is Release of a KindSemaphore, as releaseLock is of a lock. Remaining is the number of permits left, which callers ignore.
func (b *Backend) releasePermit(ctx context.Context, req driver.ReleaseRequest) (_ driver.ReleaseResult, err error) {
	defer func() { err = misconfigured(err) }() // the store refused the client: driver.ErrMisconfigured
	if err := checkRef(req.Ref); err != nil {
		return driver.ReleaseResult{}, err
	}
	res, err := b.release(ctx, semKeysOf(req.Namespace, req.Key), req)
	res.Remaining = 0 // permits are not re-entrant: nothing of this holder remains
	return res, err
}

// permitTTL is TTL of a KindSemaphore, as lockTTL is of a lock.
func (b *Backend) permitTTL(ctx context.Context, ref driver.Ref) (_ time.Duration, err error) {
	defer func() { err = misconfigured(err) }() // the store refused the client: driver.ErrMisconfigured
	if err := checkRef(ref); err != nil {
		return 0, err
	}
	return b.ttl(ctx, semKeysOf(ref.Namespace, ref.Key).hold(ref.Token))
}

// watchPermits is Watch of a KindSemaphore: every permit given back
// (released, or its lease ended) is delivered, coalesced.
func (b *Backend) watchPermits(ctx context.Context, namespace, key string) (*driver.Watch, error) {
	if key == "" {
		return nil, &driver.InvalidArgumentError{Name: "key", Value: key, Reason: "must not be empty"}
	}
	return b.watchHolds(ctx, semKeysOf(namespace, key))
}
