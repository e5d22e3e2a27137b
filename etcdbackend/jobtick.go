package etcdbackend

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/fencelock/fencelock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The record of a job's last claimed tick (driver.Ticker) is the
// key P "tick" beside the job's lock (keys.go): its value is the tick, a
// NUL byte and the token of the run that claimed it, on a lease of its own
// (the record's life), replaced by every claim. A tick has no NUL byte, so
// etcd's byte-wise comparison of the value with a tick orders the record's
// tick against it: the value is greater exactly when the record names that
// tick or a later one.

// AcquireTick implements driver.Ticker: Acquire's transaction,
// preceded by the check of the job's record and followed by its write, in
// one transaction. The record's lease is granted at the same time as the
// hold's: two round trips, as Acquire (a third for a refusal by a holder,
// to read its lease). The lease of a record replaced is revoked in the
// background, as is the new record's when the attempt took nothing.
func (b *Backend) AcquireTick(ctx context.Context, req driver.TickRequest) (driver.TickResult, error) {
	if req.Kind != driver.KindLock {
		return driver.TickResult{}, fmt.Errorf("%w: job ticks are recorded with plain locks only", driver.ErrUnsupported)
	}
	if err := checkRef(req.Ref); err != nil {
		return driver.TickResult{}, err
	}
	if req.Owner == "" {
		return driver.TickResult{}, &driver.InvalidArgumentError{Name: "owner", Value: req.Owner, Reason: "must not be empty"}
	}
	if req.Tick == "" || strings.IndexByte(req.Tick, 0) >= 0 {
		return driver.TickResult{}, &driver.InvalidArgumentError{Name: "tick", Value: req.Tick, Reason: "must be non-empty, without a NUL byte"}
	}
	if req.RecordLife <= 0 {
		return driver.TickResult{}, &driver.InvalidArgumentError{Name: "record life", Value: req.RecordLife, Reason: "must be positive"}
	}
	return b.acquire(ctx, req.Request, &tickClaim{req: req, value: req.Tick + "\x00" + req.Token})
}

// tickClaim is what Backend.acquire needs for a claim of a tick. Its
// methods on a nil *tickClaim (a plain Acquire) do nothing.
type tickClaim struct {
	req   driver.TickRequest
	value string           // the record's value for this claim
	lease clientv3.LeaseID // the record's lease
}

// grant grants the hold's lease (secs) and the record's, at once. When
// either fails, the other is revoked, and the error is returned.
func (t *tickClaim) grant(ctx context.Context, b *Backend, secs int64) (*clientv3.LeaseGrantResponse, error) {
	var hold, record *clientv3.LeaseGrantResponse
	var holdErr, recordErr error
	var wg sync.WaitGroup
	wg.Go(func() { hold, holdErr = b.cli.Grant(ctx, secs) })
	wg.Go(func() { record, recordErr = b.cli.Grant(ctx, leaseSeconds(t.req.RecordLife)) })
	wg.Wait()
	switch {
	case holdErr != nil:
		if recordErr == nil {
			b.revokeLater(record.ID)
		}
		return nil, holdErr
	case recordErr != nil:
		b.revokeLater(hold.ID)
		return nil, fmt.Errorf("the record's lease: %w", recordErr)
	}
	t.lease = record.ID
	return hold, nil
}

// claimed is the condition of a claimed tick: the record names the tick
// or a later one (a missing key fails a value compare), and it is not this
// very claim (the tick by this token).
func (t *tickClaim) claimed(k keys) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(k.tick), ">", t.req.Tick),
		clientv3.Compare(clientv3.Value(k.tick), "!=", t.value),
	}
}

// put writes the record of this claim.
func (t *tickClaim) put(k keys) clientv3.Op {
	return clientv3.OpPut(k.tick, t.value, clientv3.WithLease(t.lease), clientv3.WithPrevKV())
}

// claimedResult is the result of an attempt refused by the record r.
func (t *tickClaim) claimedResult(r *pb.RangeResponse) (driver.TickResult, error) {
	if r == nil || len(r.Kvs) != 1 {
		return driver.TickResult{}, fmt.Errorf("etcdbackend: the record of job %q vanished during its read", t.req.Key)
	}
	tick, token, ok := strings.Cut(string(r.Kvs[0].Value), "\x00")
	if !ok {
		return driver.TickResult{}, fmt.Errorf("etcdbackend: the record of job %q holds %q, not a tick and a token", t.req.Key, r.Kvs[0].Value)
	}
	return driver.TickResult{Claimed: true, LastTick: tick, LastToken: token}, nil
}

// written revokes the lease of the record the claim replaced: the put is
// the last of responses.
func (t *tickClaim) written(b *Backend, responses []*pb.ResponseOp) {
	if t == nil || len(responses) == 0 {
		return
	}
	if prev := responses[len(responses)-1].GetResponsePut().GetPrevKv(); prev != nil && prev.Lease != 0 && clientv3.LeaseID(prev.Lease) != t.lease {
		b.revokeLater(clientv3.LeaseID(prev.Lease))
	}
}

// unused revokes the record's lease of an attempt that wrote no record.
func (t *tickClaim) unused(b *Backend) {
	if t != nil {
		b.revokeLater(t.lease)
	}
}
