package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Backend is a driver.Store on etcd. It is safe for concurrent use.
// Make it with New and hand it to fencelock.New, which closes it.
type Backend struct {
	cli *clientv3.Client

	mu     sync.Mutex
	held   map[string]holdLease // by hold key: the lease this Backend attached to the hold
	places map[string]place     // by line key: the places in line of this Backend's fair waiters (fair.go)

	// Leases no hold uses any more (released, refused, replaced) are
	// revoked in the background so that the server forgets them before
	// their TTL; Close waits for those revocations.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
}

// holdLease is what a Backend remembers of a hold it attached to a lease.
type holdLease struct {
	id    clientv3.LeaseID
	asked int64 // the whole seconds asked for (ceil of the ttl)
}

// New returns a Backend that keeps locks in the etcd cluster cli talks to.
// The client stays the caller's: closing the Backend (or the fencelock
// Client that owns it) does not close cli. Give cli every member's
// endpoint, so that it can go on when one member is down.
func New(cli *clientv3.Client) *Backend {
	ctx, cancel := context.WithCancel(context.Background())
	return &Backend{cli: cli, held: map[string]holdLease{}, places: map[string]place{}, bgCtx: ctx, bgCancel: cancel}
}

// Close gives the revocations of unused leases still in flight a moment to
// finish, cancels the rest (their leases run out by themselves) and waits
// for them. It does not close the etcd client.
func (b *Backend) Close() error {
	done := make(chan struct{})
	go func() {
		b.bg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeGrace):
		b.bgCancel()
		<-done
	}
	b.bgCancel()
	return nil
}

// closeGrace is how long Close lets background revocations finish: a
// cluster that does not answer must not hold up the Client's Close.
const closeGrace = time.Second

// leaseSeconds is the lease etcd is asked for a ttl: whole seconds, rounded
// up, at least one. (The server may grant more: it has a minimum lease,
// 1.5 election timeouts, 2 s with the default settings.)
func leaseSeconds(ttl time.Duration) int64 {
	return max(int64((ttl+time.Second-1)/time.Second), 1)
}

// validity is the AcquireResult/RenewResult Validity of a lease of secs
// seconds granted for a request of ttl: the lease itself, which the server
// counts from when it grants or renews it, after the request was sent.
// (Zero, "the lease is ttl", when etcd granted exactly that.)
func validity(secs int64, ttl time.Duration) time.Duration {
	if g := time.Duration(secs) * time.Second; g != ttl {
		return g
	}
	return 0
}

// acquireLock is Acquire of a KindLock: one attempt to take the lock, in two round trips: a lease
// is granted for the hold (etcd has no way to create one inside a
// transaction), then one transaction takes a free lock, re-enters, retries
// or refuses. See the package documentation for the fence.
func (b *Backend) acquireLock(ctx context.Context, req driver.Request) (_ driver.Result, err error) {
	defer func() { err = misconfigured(err) }() // the store refused the client: driver.ErrMisconfigured
	if err := checkRef(req.Ref); err != nil {
		return driver.Result{}, err
	}
	if req.Owner == "" {
		return driver.Result{}, &driver.InvalidArgumentError{Name: "owner", Value: req.Owner, Reason: "must not be empty"}
	}
	res, err := b.acquire(ctx, req, nil)
	return res.Result, err
}

// acquire is acquireLock, and with tick, AcquireTick (jobtick.go): the
// transaction then first checks the job's record, and writes it when the
// lock is taken or kept.
func (b *Backend) acquire(ctx context.Context, req driver.Request, tick *tickClaim) (driver.TickResult, error) {
	k := keysOf(req.Namespace, req.Key)
	secs := leaseSeconds(req.TTL)
	var lease *clientv3.LeaseGrantResponse
	var err error
	if tick == nil {
		lease, err = b.cli.Grant(ctx, secs)
	} else {
		lease, err = tick.grant(ctx, b, secs) // the record's lease at the same time
	}
	if err != nil {
		// The lock was not touched; a lease the server may have granted
		// holds nothing and runs out by itself.
		return driver.TickResult{}, fmt.Errorf("%w: granting a lease of %ds: %w", driver.ErrNotSent, secs, err)
	}
	hold := k.hold(req.Token)
	put := clientv3.OpPut(hold, req.Owner, clientv3.WithLease(lease.ID), clientv3.WithPrevKV())
	getLast := clientv3.OpGet(k.last)
	getHolds := clientv3.OpGet(k.holds, clientv3.WithRange(k.holdsEnd()))
	noHolds := clientv3.Compare(clientv3.CreateRevision(k.holds), "=", 0).WithRange(k.holdsEnd())
	// Value compares fail on an empty range, so this is "held by owner"
	// only where the range is known not to be empty.
	allOwners := clientv3.Compare(clientv3.Value(k.holds), "=", req.Owner).WithRange(k.holdsEnd())
	fresh := []clientv3.Op{mint(k, req.FenceFloor, lease.Revision), put, getLast}
	kept := []clientv3.Op{put, getLast, clientv3.OpGet(k.holds, clientv3.WithRange(k.holdsEnd()), clientv3.WithCountOnly())}
	if tick != nil {
		fresh = append(fresh, tick.put(k))
		kept = append(kept, tick.put(k))
	}
	take := clientv3.OpTxn(
		[]clientv3.Cmp{noHolds},
		fresh,
		[]clientv3.Op{clientv3.OpTxn(
			[]clientv3.Cmp{allOwners},
			kept,                    // re-entry or retry
			[]clientv3.Op{getHolds}, // held by another owner
		)},
	)
	if tick != nil {
		take = clientv3.OpTxn(tick.claimed(k), []clientv3.Op{clientv3.OpGet(k.tick)}, []clientv3.Op{take})
	}
	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k.tombstone(req.Token)), "=", 0)).
		Then(take).
		Else(getHolds). // tombstoned
		Commit()
	if err != nil {
		// If the transaction never applies, revoking the lease makes sure
		// a copy still on its way cannot apply later (its put fails on
		// the missing lease); if it applied, the hold goes with the lease,
		// which the Client's cleanup (a release with a tombstone) wants.
		// A record it wrote keeps its lease: its claim may count.
		b.revokeLater(lease.ID)
		return driver.TickResult{}, err
	}
	var holdsKVs []*mvccpb.KeyValue
	switch {
	case !resp.Succeeded:
		holdsKVs = resp.Responses[0].GetResponseRange().Kvs
	default:
		outer := resp.Responses[0].GetResponseTxn()
		if tick != nil {
			if outer.Succeeded { // the tick was claimed
				b.revokeLater(lease.ID)
				tick.unused(b)
				return tick.claimedResult(outer.Responses[0].GetResponseRange())
			}
			outer = outer.Responses[0].GetResponseTxn()
		}
		if outer.Succeeded { // a fresh acquisition
			fence, err := fenceOf(outer.Responses[2].GetResponseRange())
			if err != nil {
				return driver.TickResult{}, err
			}
			b.remember(hold, holdLease{id: lease.ID, asked: secs})
			tick.written(b, outer.Responses)
			return driver.TickResult{Result: driver.Result{Acquired: true, Fence: fence, Holds: 1, Validity: validity(lease.TTL, req.TTL)}}, nil
		}
		inner := outer.Responses[0].GetResponseTxn()
		if inner.Succeeded { // re-entry, or a retry of this token's acquire
			if prev := inner.Responses[0].GetResponsePut().PrevKv; prev != nil && clientv3.LeaseID(prev.Lease) != lease.ID {
				b.revokeLater(clientv3.LeaseID(prev.Lease)) // the retry moved the hold to the new lease
			}
			fence, err := fenceOf(inner.Responses[1].GetResponseRange())
			if err != nil {
				return driver.TickResult{}, err
			}
			b.remember(hold, holdLease{id: lease.ID, asked: secs})
			tick.written(b, inner.Responses)
			holds := int(inner.Responses[2].GetResponseRange().Count)
			return driver.TickResult{Result: driver.Result{Acquired: true, Fence: fence, Holds: holds, Validity: validity(lease.TTL, req.TTL)}}, nil
		}
		holdsKVs = inner.Responses[0].GetResponseRange().Kvs
	}
	b.revokeLater(lease.ID) // refused: the lease holds nothing
	tick.unused(b)
	return driver.TickResult{Result: driver.Result{HolderTTL: b.holderTTL(ctx, holdsKVs)}}, nil
}

// mint is the operation that records a fresh acquisition: it puts the
// fence record, whose ModRevision becomes this transaction's revision R,
// keeping its base, so that the fence base+R is above every earlier one.
//
// The fence must also be above floor (the largest fence the Client has
// seen). R is above the revision rev that the lease grant just reported,
// so when floor <= rev nothing more is needed; otherwise the base is
// raised to floor (never lowered), which puts this fence and every later
// one above it. That happens only when the Client saw fences from
// elsewhere (another store, or an etcd cluster that was rebuilt and
// started its revisions again).
func mint(k keys, floor, rev int64) clientv3.Op {
	if rev > 0 && floor <= rev {
		floor = 0
	}
	// Keep the record's base (a put with its own value), or create the
	// record with base floor. (A value compare fails on a missing key.)
	keepOrCreate := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k.last), ">", 0)},
		[]clientv3.Op{clientv3.OpPut(k.last, "", clientv3.WithIgnoreValue())},
		[]clientv3.Op{clientv3.OpPut(k.last, padBase(floor))})
	if floor == 0 {
		return keepOrCreate
	}
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(k.last), "<", padBase(floor))},
		[]clientv3.Op{clientv3.OpPut(k.last, padBase(floor))},
		[]clientv3.Op{keepOrCreate})
}

// fenceOf reads the fence from the fence record: base + ModRevision.
func fenceOf(r *pb.RangeResponse) (int64, error) {
	if r == nil || len(r.Kvs) == 0 {
		return 0, nil
	}
	base, err := parseBase(r.Kvs[0].Value)
	if err != nil {
		return 0, err
	}
	return base + r.Kvs[0].ModRevision, nil
}

// holderTTL is the HolderTTL of a refused acquire: an upper bound of when
// the last of the holds' leases ends (etcd reports whole seconds, rounded
// down, so a second is added, up to the granted TTL), or 0 when unknown.
func (b *Backend) holderTTL(ctx context.Context, holds []*mvccpb.KeyValue) time.Duration {
	var leases []clientv3.LeaseID
	for _, kv := range holds {
		if kv.Lease != 0 {
			leases = append(leases, clientv3.LeaseID(kv.Lease))
		}
	}
	ttls := b.timeToLive(ctx, leases)
	var longest time.Duration
	for _, t := range ttls {
		if t.ttl >= 0 {
			longest = max(longest, min(time.Duration(t.ttl+1)*time.Second, time.Duration(t.granted)*time.Second))
		}
	}
	return longest
}

// leaseTTL is a lease's remaining time (whole seconds, rounded down; -1
// when the lease is gone or could not be asked) and its granted TTL.
type leaseTTL struct{ ttl, granted int64 }

// timeToLive asks for the remaining time of leases, concurrently (one
// round trip).
func (b *Backend) timeToLive(ctx context.Context, leases []clientv3.LeaseID) []leaseTTL {
	out := make([]leaseTTL, len(leases))
	var wg sync.WaitGroup
	for i, id := range leases {
		wg.Go(func() {
			out[i] = leaseTTL{ttl: -1}
			if r, err := b.cli.TimeToLive(ctx, id); err == nil {
				out[i] = leaseTTL{ttl: r.TTL, granted: r.GrantedTTL}
			}
		})
	}
	wg.Wait()
	return out
}

// releaseLock is Release of a KindLock: it gives up the hold in one round trip (two with a tombstone, whose
// lease is granted first). The hold's lease is then revoked in the
// background.
func (b *Backend) releaseLock(ctx context.Context, req driver.ReleaseRequest) (_ driver.ReleaseResult, err error) {
	defer func() { err = misconfigured(err) }() // the store refused the client: driver.ErrMisconfigured
	if err := checkRef(req.Ref); err != nil {
		return driver.ReleaseResult{}, err
	}
	return b.release(ctx, keysOf(req.Namespace, req.Key), req)
}

// release gives up the hold of req.Token among the holds of k (a lock's,
// or a semaphore's permits).
func (b *Backend) release(ctx context.Context, k keys, req driver.ReleaseRequest) (driver.ReleaseResult, error) {
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
	// The token's place in the lock's fair line goes too (a fair waiter
	// that gave up), which wakes the waiter behind it (watchTurn).
	leave := clientv3.OpDelete(k.lineKey(req.Token))
	then := append([]clientv3.Op{
		clientv3.OpDelete(hold, clientv3.WithPrevKV()),
		clientv3.OpGet(k.holds, clientv3.WithRange(k.holdsEnd()), clientv3.WithCountOnly()),
		leave,
	}, tomb...)
	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(hold), ">", 0)).
		Then(then...).
		Else(append([]clientv3.Op{leave}, tomb...)...).
		Commit()
	if err != nil {
		return driver.ReleaseResult{}, err
	}
	b.forget(hold)
	if p, ok := b.placeOf(k.lineKey(req.Token)); ok {
		b.forgetPlace(k.lineKey(req.Token))
		b.revokeLater(p.lease)
	}
	if !resp.Succeeded {
		return driver.ReleaseResult{}, nil
	}
	if prev := resp.Responses[0].GetResponseDeleteRange().PrevKvs; len(prev) == 1 && prev[0].Lease != 0 {
		b.revokeLater(clientv3.LeaseID(prev[0].Lease))
	}
	return driver.ReleaseResult{Held: true, Remaining: int(resp.Responses[1].GetResponseRange().Count)}, nil
}

// Renew extends a batch of holds in one round trip: one transaction reads
// every hold while one keep-alive stream renews the leases this Backend
// attached to them. A hold whose ttl asks for a different number of
// seconds than its lease has (Refresh with a new ttl), or whose lease this
// Backend does not know, is moved to a new lease: a grant and a
// transaction more, for that hold.
func (b *Backend) Renew(ctx context.Context, reqs []driver.RenewRequest) (results []driver.RenewResult, err error) {
	defer func() { results, err = misconfiguredResults(results), misconfigured(err) }() // the store refused the client: driver.ErrMisconfigured
	for _, r := range reqs {
		if !b.Supports(r.Kind) {
			return nil, unsupportedKind(r.Kind)
		}
	}
	return b.renew(ctx, reqs)
}

// renew renews a batch of holds of any kinds, each among the holds of its
// kind's keys (holdKeysOf).
func (b *Backend) renew(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	results := make([]driver.RenewResult, len(reqs))
	var gets []clientv3.Op
	var idx []int // reqs index of each get
	var alive []clientv3.LeaseID
	known := make([]holdLease, len(reqs))
	for i, r := range reqs {
		if err := checkRef(r.Ref); err != nil {
			results[i].Err = err
			continue
		}
		hold := holdKeysOf(r.Ref).hold(r.Token)
		gets = append(gets, clientv3.OpGet(hold))
		idx = append(idx, i)
		if hl, ok := b.lookup(hold); ok && hl.asked == leaseSeconds(r.TTL) {
			known[i] = hl
			alive = append(alive, hl.id)
		}
	}
	if len(gets) == 0 {
		return results, nil
	}
	var txn *clientv3.TxnResponse
	var txnErr, kaErr error
	var ttls map[clientv3.LeaseID]int64
	var wg sync.WaitGroup
	wg.Go(func() { txn, txnErr = b.cli.Txn(ctx).Then(gets...).Commit() })
	wg.Go(func() { ttls, kaErr = b.keepAlive(ctx, alive) })
	wg.Wait()
	if txnErr != nil {
		return nil, txnErr
	}
	for j, r := range txn.Responses {
		i := idx[j]
		req := reqs[i]
		hold := holdKeysOf(req.Ref).hold(req.Token)
		kvs := r.GetResponseRange().Kvs
		switch {
		case len(kvs) == 0:
			b.forget(hold)
			results[i] = driver.RenewResult{Held: false}
		case known[i].id != 0 && clientv3.LeaseID(kvs[0].Lease) == known[i].id:
			switch ttl, ok := ttls[known[i].id]; {
			case kaErr != nil && !ok:
				results[i].Err = kaErr
			case ttl <= 0:
				// The lease ended (the hold is about to be deleted).
				b.forget(hold)
				results[i] = driver.RenewResult{Held: false}
			default:
				results[i] = driver.RenewResult{Held: true, Validity: validity(ttl, req.TTL)}
			}
		default:
			results[i] = b.relet(ctx, req, hold, clientv3.LeaseID(kvs[0].Lease))
		}
	}
	return results, nil
}

// relet moves a hold from lease old to a new lease of req.TTL, if the hold
// is still on old: the hold's key is put again with its value, which keeps
// its create revision (and the lock's fence).
func (b *Backend) relet(ctx context.Context, req driver.RenewRequest, hold string, old clientv3.LeaseID) driver.RenewResult {
	secs := leaseSeconds(req.TTL)
	lease, err := b.cli.Grant(ctx, secs)
	if err != nil {
		return driver.RenewResult{Err: fmt.Errorf("%w: granting a lease of %ds: %w", driver.ErrNotSent, secs, err)}
	}
	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(hold), ">", 0), clientv3.Compare(clientv3.LeaseValue(hold), "=", old)).
		Then(clientv3.OpPut(hold, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease.ID))).
		Else(clientv3.OpGet(hold)).
		Commit()
	if err != nil {
		b.revokeLater(lease.ID)
		return driver.RenewResult{Err: err}
	}
	if !resp.Succeeded {
		b.revokeLater(lease.ID)
		if len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
			b.forget(hold)
			return driver.RenewResult{Held: false}
		}
		return driver.RenewResult{Err: errors.New("etcdbackend: the hold moved to another lease during its renewal")}
	}
	if old != 0 {
		b.revokeLater(old)
	}
	b.remember(hold, holdLease{id: lease.ID, asked: secs})
	return driver.RenewResult{Held: true, Validity: validity(lease.TTL, req.TTL)}
}

// keepAlive renews leases on one keep-alive stream, sending every request
// before reading the replies, and returns each lease's new TTL (0 or less:
// the lease is gone). The stream is made here and closed before returning:
// nothing is re-sent, unlike the etcd client's KeepAliveOnce, which retries
// on its own.
func (b *Backend) keepAlive(ctx context.Context, ids []clientv3.LeaseID) (map[clientv3.LeaseID]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	stream, err := pb.NewLeaseClient(b.cli.ActiveConnection()).LeaseKeepAlive(sctx)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
			return nil, err
		}
	}
	ttls := make(map[clientv3.LeaseID]int64, len(ids))
	for len(ttls) < len(ids) {
		r, err := stream.Recv()
		if err != nil {
			return ttls, err
		}
		ttls[clientv3.LeaseID(r.ID)] = r.TTL
	}
	stream.CloseSend()
	return ttls, nil
}

// lockTTL is TTL of a KindLock: the hold's remaining lease, rounded down to whole seconds by
// etcd (at least a millisecond while the lease runs), in two round trips:
// the hold, then its lease.
func (b *Backend) lockTTL(ctx context.Context, ref driver.Ref) (_ time.Duration, err error) {
	defer func() { err = misconfigured(err) }() // the store refused the client: driver.ErrMisconfigured
	if err := checkRef(ref); err != nil {
		return 0, err
	}
	return b.ttl(ctx, keysOf(ref.Namespace, ref.Key).hold(ref.Token))
}

// ttl returns the remaining lease of the hold whose key is hold.
func (b *Backend) ttl(ctx context.Context, hold string) (time.Duration, error) {
	resp, err := b.cli.Get(ctx, hold)
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		return 0, driver.ErrNotHeld
	}
	r, err := b.cli.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil {
		return 0, err
	}
	if r.TTL < 0 {
		return 0, driver.ErrNotHeld
	}
	return max(time.Duration(r.TTL)*time.Second, time.Millisecond), nil
}

func (b *Backend) remember(hold string, hl holdLease) {
	b.mu.Lock()
	b.held[hold] = hl
	b.mu.Unlock()
}

func (b *Backend) forget(hold string) {
	b.mu.Lock()
	delete(b.held, hold)
	b.mu.Unlock()
}

func (b *Backend) lookup(hold string) (holdLease, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	hl, ok := b.held[hold]
	return hl, ok
}

// revokeTimeout bounds a background revocation: a lease that could not be
// revoked runs out by itself.
const revokeTimeout = 5 * time.Second

// revokeLater revokes a lease that holds nothing any more, in the
// background: no caller waits for it, and Close waits for it.
func (b *Backend) revokeLater(id clientv3.LeaseID) {
	b.bg.Go(func() {
		ctx, cancel := context.WithTimeout(b.bgCtx, revokeTimeout)
		defer cancel()
		b.cli.Revoke(ctx, id)
	})
}
