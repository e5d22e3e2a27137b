package etcdbackend

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// InspectLock implements driver.Inspector: it reads the holds and
// fence record of the lock, and the permits and read-write holds of the
// same name, in one transaction, then the holds' leases (one round trip
// more, concurrently). Lease times are whole seconds, rounded down by
// etcd; a hold whose lease has run out but which etcd has not deleted yet
// is left out.
func (b *Backend) InspectLock(ctx context.Context, namespace, key string) (_ driver.LockInfo, err error) {
	defer func() { err = misconfigured(err) }() // the store refused the client: driver.ErrMisconfigured
	if key == "" {
		return driver.LockInfo{}, &driver.InvalidArgumentError{Name: "key", Value: key, Reason: "must not be empty"}
	}
	k, sem, rw := keysOf(namespace, key), semKeysOf(namespace, key), rwKeysFor(namespace, key)
	resp, err := b.cli.Txn(ctx).Then(
		clientv3.OpGet(k.holds, clientv3.WithRange(k.holdsEnd())),
		clientv3.OpGet(k.last),
		clientv3.OpGet(sem.holds, clientv3.WithRange(sem.holdsEnd())),
		clientv3.OpGet(rw.holds, clientv3.WithRange(rw.holdsEnd())),
	).Commit()
	if err != nil {
		return driver.LockInfo{}, err
	}
	info := driver.LockInfo{Key: key}
	if info.LastFence, err = fenceOf(resp.Responses[1].GetResponseRange()); err != nil {
		return driver.LockInfo{}, err
	}
	lockKvs := resp.Responses[0].GetResponseRange().Kvs
	semKvs := resp.Responses[2].GetResponseRange().Kvs
	rwKvs := resp.Responses[3].GetResponseRange().Kvs
	all := slices.Concat(lockKvs, semKvs, rwKvs)
	leases := make([]clientv3.LeaseID, len(all))
	for i, kv := range all {
		leases[i] = clientv3.LeaseID(kv.Lease)
	}
	ttls := b.timeToLive(ctx, leases)
	ttlOf := func(i int) (time.Duration, bool) {
		if ttls[i].ttl < 0 {
			return 0, false // gone, or could not be asked
		}
		return max(time.Duration(ttls[i].ttl)*time.Second, time.Millisecond), true
	}
	for i, kv := range lockKvs {
		ttl, ok := ttlOf(i)
		if !ok {
			continue
		}
		info.Holds = append(info.Holds, driver.HoldInfo{Kind: driver.KindLock, Token: strings.TrimPrefix(string(kv.Key), k.holds), TTL: ttl})
		info.Owner = string(kv.Value)
		info.TTL = max(info.TTL, ttl)
	}
	if len(info.Holds) == 0 {
		info.Owner, info.TTL = "", 0
	} else {
		slices.SortFunc(info.Holds, func(a, b driver.HoldInfo) int { return strings.Compare(a.Token, b.Token) })
		// Every fresh acquisition moves the fence record, and none happens
		// while a hold exists: the holder's fence is the last one minted.
		info.Held, info.Fence = true, info.LastFence
		for i := range info.Holds {
			info.Holds[i].Fence = info.Fence
		}
	}
	// A permit's value is the fence base at its acquisition; a read-write
	// hold's is "r" or "w" and the base. The fence adds the key's create
	// revision.
	for i, kv := range all[len(lockKvs):] {
		ttl, ok := ttlOf(len(lockKvs) + i)
		if !ok {
			continue
		}
		h := driver.HoldInfo{Kind: driver.KindSemaphore, Token: strings.TrimPrefix(string(kv.Key), sem.holds), TTL: ttl}
		value := kv.Value
		if i >= len(semKvs) {
			h.Kind, h.Token = driver.KindRead, strings.TrimPrefix(string(kv.Key), rw.holds)
			if len(value) > 0 && value[0] == 'w' {
				h.Kind = driver.KindWrite
			}
			if len(value) > 0 {
				value = value[1:]
			}
		}
		base, err := parseBase(value)
		if err != nil {
			return driver.LockInfo{}, err
		}
		h.Fence = base + kv.CreateRevision
		info.Others = append(info.Others, h)
	}
	slices.SortFunc(info.Others, func(a, b driver.HoldInfo) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Fence, b.Fence))
	})
	return info, nil
}

// Check implements driver.Store: every namespace is usable (etcd keys
// are any bytes, and the names are escaped), so it checks only that the
// cluster answers a linearizable read of the namespace, which it refuses
// (driver.ErrMisconfigured) to a client without a user on a cluster with
// authentication on, or to a user whose roles do not let it read there.
func (b *Backend) Check(ctx context.Context, namespace string) error {
	_, err := b.cli.Get(ctx, keysOf(namespace, "check").last, clientv3.WithCountOnly())
	return misconfigured(err)
}
