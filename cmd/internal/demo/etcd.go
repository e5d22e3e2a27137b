package demo

import "time"

// EtcdElectionArgs are the timing flags of the demo's etcd members: a
// heartbeat of 100 ms and an election timeout of 600 ms make etcd's
// minimum lease 1 s (1.5 election timeouts, rounded up to a whole second)
// instead of 2 s, so that the lease scenarios stay short.
var EtcdElectionArgs = []string{"--heartbeat-interval", "100", "--election-timeout", "600"}

// etcdExpirySlack bounds how late etcd ends an expired lease: its leader
// revokes expired leases in a loop every 500 ms, and a busy machine adds to
// that.
const etcdExpirySlack = time.Second

// AdaptEtcd is the etcd Backend's Adapt: the lease scenarios with leases
// of whole seconds (etcd's unit; the minimum is 1 s with
// EtcdElectionArgs), restart with every member kill -9ed and restarted
// (etcd keeps its data, so the lock held across it must be kept: the lease
// outlasts the restart), and the Redis-only scenarios skipped.
func AdaptEtcd(sc Scenario) (Scenario, string) {
	if why := skipNotRedis(sc, BackendEtcd); why != "" {
		return sc, why
	}
	sc.ExpirySlack = etcdExpirySlack
	switch sc.Name {
	case "expiry":
		sc.Lease, sc.Hold, sc.Iterations = time.Second, 3*time.Second, 2
		sc.Summary = "hold (3s) longer than the lease (1s, etcd's least here), no renewal, loss ignored: overlaps, stale writes all refused"
	case "renew":
		sc.Lease, sc.Hold, sc.Renew, sc.Iterations = time.Second, 3*time.Second, 300*time.Millisecond, 1
		sc.Summary = "same hold and lease, renewed every 300ms: no overlap, no stale write"
	case "pause":
		sc.Lease, sc.Hold, sc.Renew = time.Second, 600*time.Millisecond, 300*time.Millisecond
	case "crash":
		sc.Lease, sc.Hold, sc.Renew = time.Second, 300*time.Millisecond, 300*time.Millisecond
	case "restart":
		// The lease outlasts the restart (the members need a few seconds
		// to elect a leader; the new leader extends every lease), so the
		// holder keeps its lock through it.
		sc.Lease, sc.Hold, sc.Renew, sc.Iterations = 8*time.Second, 300*time.Millisecond, time.Second, 4
		sc.SQLStore = false // the referee is not restarted: the store may stay on it
		sc.RestartSafe, sc.KeepsLocks = true, true
		sc.Summary = "every etcd member kill -9ed and restarted: no lock lost (etcd keeps it on disk), fences keep increasing"
	}
	return sc, ""
}
