package etcdbackend

import (
	"context"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchReady bounds how long a Watch waits for etcd to confirm a new
// watch: a notification is a hint, and the waiter keeps its fallback timer.
const watchReady = time.Second

// rewatchDelay is the pause before a watch that etcd ended (a member went
// away, the watch was cancelled) is made again.
const rewatchDelay = 100 * time.Millisecond

// watchReleases is Watch of a KindLock: an etcd watch on
// the lock's holds: every deletion of a hold (a release, a lease that ran
// out, a re-entrant hold given up) is delivered, coalesced. A watch that
// etcd ends (its member went away, the cluster lost its leader) delivers a
// value, since a release may have been missed, and is made again.
//
// The watch is on the lock's holds alone, so a release wakes the waiters
// of that lock and no other.
func (b *Backend) watchReleases(ctx context.Context, namespace, key string) (*driver.Watch, error) {
	if key == "" {
		return nil, &driver.InvalidArgumentError{Name: "key", Value: key, Reason: "must not be empty"}
	}
	return b.watchHolds(ctx, keysOf(namespace, key))
}

// watchChanges is watchReleases (for a WatchRequest with Changes) whose
// watch is also woken when a hold is created, by any acquisition (an etcd
// watch sees every write, so Request.Notify is not needed) but not
// by renewals, which put a hold again without creating it.
func (b *Backend) watchChanges(ctx context.Context, namespace, key string) (*driver.Watch, error) {
	if key == "" {
		return nil, &driver.InvalidArgumentError{Name: "key", Value: key, Reason: "must not be empty"}
	}
	k := keysOf(namespace, key)
	return b.watchRange(ctx, k.holds, k.holdsEnd(), func(ev *clientv3.Event) bool {
		return ev.Type == clientv3.EventTypeDelete || ev.IsCreate()
	})
}

// watchHolds delivers, coalesced, every deletion among the holds of k.
func (b *Backend) watchHolds(ctx context.Context, k keys) (*driver.Watch, error) {
	return b.watchRange(ctx, k.holds, k.holdsEnd(), func(ev *clientv3.Event) bool { return ev.Type == clientv3.EventTypeDelete })
}

// watchRange delivers, coalesced, every event in [from, to) that wanted
// accepts, and a value whenever the watch had to be made again.
func (b *Backend) watchRange(ctx context.Context, from, to string, wanted func(*clientv3.Event) bool) (*driver.Watch, error) {
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
			// WithRequireLeader: a member cut off from the leader ends the
			// watch at once rather than staying silent.
			ictx, icancel := context.WithCancel(wctx)
			ch := b.cli.Watch(clientv3.WithRequireLeader(ictx), from, clientv3.WithRange(to), clientv3.WithCreatedNotify())
			for resp := range ch {
				if resp.Created {
					readyOnce.Do(func() { close(ready) })
				}
				for _, ev := range resp.Events {
					if wanted(ev) {
						notify()
					}
				}
				if resp.Err() != nil || resp.Canceled {
					break
				}
			}
			icancel()
			if wctx.Err() != nil {
				return
			}
			notify() // the watch ended: a release may have gone unseen
			select {
			case <-wctx.Done():
			case <-time.After(rewatchDelay):
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
