package etcdbackend

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// InspectLock implements fencelock.LockInspector: it reads the lock's holds
// and fence record in one transaction, then the holds' leases (one round
// trip more, concurrently). Lease times are whole seconds, rounded down by
// etcd; a hold whose lease has run out but which etcd has not deleted yet
// is left out.
func (b *Backend) InspectLock(ctx context.Context, namespace, key string) (_ fencelock.LockInfo, err error) {
	defer func() { err = misconfigured(err) }() // the store refused the client: fencelock.ErrMisconfigured
	if key == "" {
		return fencelock.LockInfo{}, &fencelock.InvalidArgumentError{Name: "key", Value: key, Reason: "must not be empty"}
	}
	k := keysOf(namespace, key)
	resp, err := b.cli.Txn(ctx).Then(
		clientv3.OpGet(k.holds, clientv3.WithRange(k.holdsEnd())),
		clientv3.OpGet(k.last),
	).Commit()
	if err != nil {
		return fencelock.LockInfo{}, err
	}
	info := fencelock.LockInfo{Key: key}
	if info.LastFence, err = fenceOf(resp.Responses[1].GetResponseRange()); err != nil {
		return fencelock.LockInfo{}, err
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	leases := make([]clientv3.LeaseID, len(kvs))
	for i, kv := range kvs {
		leases[i] = clientv3.LeaseID(kv.Lease)
	}
	ttls := b.timeToLive(ctx, leases)
	for i, kv := range kvs {
		if ttls[i].ttl < 0 {
			continue // gone, or could not be asked
		}
		ttl := max(time.Duration(ttls[i].ttl)*time.Second, time.Millisecond)
		info.Holds = append(info.Holds, fencelock.HoldInfo{Token: strings.TrimPrefix(string(kv.Key), k.holds), TTL: ttl})
		info.Owner = string(kv.Value)
		info.TTL = max(info.TTL, ttl)
	}
	if len(info.Holds) == 0 {
		info.Owner, info.TTL = "", 0
		return info, nil
	}
	slices.SortFunc(info.Holds, func(a, b fencelock.HoldInfo) int { return strings.Compare(a.Token, b.Token) })
	// Every fresh acquisition moves the fence record, and none happens
	// while a hold exists: the holder's fence is the last one minted.
	info.Held, info.Fence = true, info.LastFence
	return info, nil
}

// Check implements fencelock.Checker: every namespace is usable (etcd keys
// are any bytes, and the names are escaped), so it checks only that the
// cluster answers a linearizable read of the namespace, which it refuses
// (fencelock.ErrMisconfigured) to a client without a user on a cluster with
// authentication on, or to a user whose roles do not let it read there.
func (b *Backend) Check(ctx context.Context, namespace string) error {
	_, err := b.cli.Get(ctx, keysOf(namespace, "check").last, clientv3.WithCountOnly())
	return misconfigured(err)
}
