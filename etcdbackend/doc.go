// Package etcdbackend is a driver.Store on etcd (go.etcd.io/etcd/client/v3),
// for locks whose safety must not depend on timing: etcd keeps every lock
// in a Raft log replicated to a majority of its members, so a lock survives
// the loss of a minority (a killed leader, a member cut off), and a fencing
// token, once returned, is never handed out again.
//
// It is a Go module of its own, so that users of the Redis backend download
// nothing of etcd:
//
//	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"etcd-1:2379", "etcd-2:2379", "etcd-3:2379"}})
//	...
//	locks := fencelock.New(etcdbackend.New(cli))
//	defer locks.Close()
//
// Everything a fencelock.Client does works on it: TryAcquire, Acquire, Do,
// re-entry with WithOwner, Refresh, TTL, the lease keeper's renewals and its
// loss signal, Inspect and ForceRelease (driver.Inspector), Check,
// release notifications and notifications of new holders for Observe
// (driver.Notifier), the fair line of WithFairness (driver.Lines, whose
// HandOff never hands a lock over), RunJob (driver.Ticker), semaphores and
// read-write locks.
//
// # Leases
//
// Every hold (an acquisition, or a re-entry by its owner) has an etcd lease
// of its own, so that holds expire one by one as the contract asks (a
// re-entrant hold with a short ttl lapses while its owner's other hold goes
// on). One lease per Client, as etcd's concurrency package keeps, would end
// every lock together and could not give each lock its own ttl.
//
// etcd counts leases in whole seconds and has a minimum lease (1.5 election
// timeouts: 2 s with the default 1 s election timeout). A ttl that is not a
// whole number of seconds is rounded up, and one below the minimum gets the
// minimum; the backend reports the lease it got as AcquireResult.Validity
// and RenewResult.Validity, and the Client counts the lock's local deadline
// (and Lock.Deadline) from it. Lock.TTL and Inspect report whole seconds,
// rounded down by etcd. Leases are timed by the leader; a new leader
// extends every lease when it takes over, so a failover never shortens one.
//
// # Fences
//
// The fence of a fresh acquisition is the etcd revision of the transaction
// that took the lock: it rises with every write to the cluster, and it is
// part of the replicated state, so it survives leader changes and restarts.
// Re-entry keeps the owner's fence. The fencelock contract also asks that a
// fence be above the request's FenceFloor (the largest fence the Client has
// seen, for any key); a revision is above every floor that came from the
// same cluster, and for a floor above the cluster's current revision (fences
// from somewhere else, or a cluster rebuilt from nothing, whose revisions
// start again at 1) the lock's fence base is raised to the floor, in the
// same transaction: its fences are base + revision from then on. The base
// is kept with the lock (never lowered), so fences still only rise.
//
// # Costs
//
// An uncontended acquire is two round trips: a lease grant, then one
// transaction (etcd cannot create a lease inside a transaction). A refused
// attempt takes a third, to read the holder's lease for HolderTTL. A release
// is one transaction (two with a tombstone, which has a lease of its own);
// the released hold's lease is revoked in the background. A renewal batch is
// one read transaction and one keep-alive stream, sent together. Every
// write waits for a majority of members to write it to disk.
//
// # Waiting
//
// A waiter watches the lock's holds (an etcd watch): a release or a lease
// that ran out wakes it at once. Every waiter of the lock is woken, and the
// first to reach etcd wins, as with the Redis backend without WithFairness.
//
// With WithFairness, waiting is etcd's own recipe: each waiter puts a key
// in the lock's line, on a lease of its own (its place, renewed with each
// attempt), and the line's order is the keys' create revisions, one total
// order for the whole cluster. The free lock goes to the first key of the
// line. Each waiter watches only the key just before its own, and, once
// first, the lock's holds: a release wakes the next waiter and no other
// (no thundering herd). A waiter that crashes loses its place when its
// lease ends (2 s, driver.PlaceLease).
//
// # Semaphores and read-write locks
//
// A semaphore's permits, and a read-write lock's read and write holds, are
// holds of their own, each on its own lease; a hold's fence is the fence
// base plus its key's create revision. etcd cannot count keys inside a
// transaction, so an acquire reads every key of the semaphore (or
// read-write lock), decides as the Redis backend's script does, then writes
// on condition that no key was put since the read (three round trips; a
// write that loses the race reads again). Deletions meanwhile (releases,
// lapsed leases) only let more callers in, so they need no check. A
// read-write lock's waiting writers register intents, and waiting readers
// places, each on a lease of its own; a writer's release admits the readers
// whose places are older than it (writers preferred, readers not starved).
//
// # Keys
//
// A lock's keys share the prefix namespace/key/ (both escaped, so that no
// lock's prefix is inside another's): its holds under h/ (value: the
// owner), tombstones under t/, and the fence record "last", which is never
// deleted.
package etcdbackend
