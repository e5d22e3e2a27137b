package demo

import (
	"fmt"
	"strings"
	"time"
)

// Scenario is one experiment: how long the lease is, how long each holder
// keeps the lock, whether it renews, and what the master does to the holders
// or the server meanwhile.
type Scenario struct {
	Name  string
	Lease time.Duration
	Hold  time.Duration
	Renew time.Duration // 0: no renewal

	// IgnoreLoss makes the workers hold for the full Hold even after the
	// lock told them it was lost (expiry: to show what the fence does).
	// Otherwise a loss signal ends the hold at once.
	IgnoreLoss bool

	// Iterations is the default number of iterations per worker, chosen so
	// that every scenario takes a few seconds and "all" about a minute.
	Iterations int

	Pauses  int  // holders the master SIGSTOPs for PauseFor, then SIGCONTs
	Kills   int  // holders the master kill -9s mid-hold
	Restart bool // the master kill -9s and restarts redis-server mid-run

	// RestartSafe: the restart must not let two hold the lock (a Backend
	// that restarts only a minority of its servers, or whose store
	// persists): no overlap is excused, as on one Redis restarted empty.
	// KeepsLocks: besides, the holder at the restart must keep its lock
	// (etcd: it persists every lock on a majority).
	RestartSafe, KeepsLocks bool

	// ExpirySlack is how long after its ttl the store may still hold an
	// expired lease (etcd revokes expired leases in a loop, every 500 ms):
	// added to the bounds on a takeover and on a killed holder's lock
	// becoming free.
	ExpirySlack time.Duration

	// SQLStore: the fenced store must not live in the Redis being restarted.
	SQLStore bool

	// Failover puts the lock on a private replicated Redis, lockSentinel or
	// lockCluster, whose master the master kill -9s Failovers times (the
	// default; --failovers overrides it) while a worker holds the lock,
	// StallFor after it stalled the replicas. The workers iterate until
	// the failovers are done (Iterations is 0).
	Failover  string
	Failovers int
	StallFor  time.Duration

	// Fair makes the scenario the fair lock's comparison (fair.go): its
	// own worker processes and runs instead of Iterations.
	Fair bool

	// Prim makes the scenario a primitive's (prims.go): primSemaphore,
	// primRWLock, primElection or primJobs, with worker processes of its
	// own instead of Iterations.
	Prim string

	Summary string // one line for the help text
}

// PauseFor is how long a paused holder stays stopped.
func (s Scenario) PauseFor() time.Duration { return 2 * s.Lease }

// TakeoverBound is how soon, after a holder was paused or killed, another
// worker must have the lock: the lease (which ran out on the server at most
// that long after the last renewal, or ExpirySlack later) plus 100 ms for
// the waiter to notice.
func (s Scenario) TakeoverBound() time.Duration {
	return s.Lease + s.ExpirySlack + 100*time.Millisecond
}

// Scenarios lists every scenario in the order "all" runs them.
var Scenarios = []Scenario{
	{
		Name: "mutex", Lease: 5 * time.Second, Hold: 50 * time.Millisecond,
		Iterations: 16,
		Summary:    "hold (50ms) shorter than the lease (5s): no overlap, no stale write",
	},
	{
		Name: "expiry", Lease: 300 * time.Millisecond, Hold: 900 * time.Millisecond,
		IgnoreLoss: true, Iterations: 4,
		Summary: "hold (900ms) longer than the lease (300ms), no renewal, loss ignored: overlaps, stale writes all refused",
	},
	{
		Name: "renew", Lease: 300 * time.Millisecond, Hold: 900 * time.Millisecond, Renew: 100 * time.Millisecond,
		Iterations: 2,
		Summary:    "same hold and lease, renewed every 100ms: no overlap, no stale write",
	},
	{
		Name: "pause", Lease: 500 * time.Millisecond, Hold: 300 * time.Millisecond, Renew: 150 * time.Millisecond,
		Iterations: 3, Pauses: 3,
		Summary: "3 holders SIGSTOPped for 2 x lease: they learn of the loss, their late writes are refused",
	},
	{
		Name: "crash", Lease: time.Second, Hold: 100 * time.Millisecond, Renew: 300 * time.Millisecond,
		Iterations: 5, Kills: 2,
		Summary: "2 holders kill -9ed mid-hold: the lock is free again within the lease",
	},
	{
		Name: "restart", Lease: 500 * time.Millisecond, Hold: 200 * time.Millisecond, Renew: 150 * time.Millisecond,
		Iterations: 6, Restart: true, SQLStore: true,
		Summary: "redis-server kill -9ed and restarted empty: fences keep increasing (private server only)",
	},
	{
		Name: "fair", Lease: 2 * time.Second, Hold: time.Millisecond, Fair: true,
		Summary: "4 processes x 4 goroutines, hold 1ms: plain Acquire, then WithFairness (turns per worker, waits); then a process kill -9ed while its goroutines wait in line: the hand-off goes on",
	},
	{
		Name: primSemaphore, Lease: 2 * time.Second, Hold: 20 * time.Millisecond, Renew: 500 * time.Millisecond, Prim: primSemaphore,
		Summary: "Client.Semaphore, 3 permits, 4 processes x 3 goroutines: never over 3 holders; a holder process kill -9ed: its permit is free after its lease",
	},
	{
		Name: primRWLock, Lease: 2 * time.Second, Hold: 30 * time.Millisecond, Renew: 500 * time.Millisecond, Prim: primRWLock,
		Summary: "Client.RWLock, 4 processes x (3 readers + 1 writer): readers overlap, no writer beside anyone, writers get in past a stream of readers",
	},
	{
		Name: primElection, Lease: 2 * time.Second, Hold: 300 * time.Millisecond, Renew: 500 * time.Millisecond, Prim: primElection,
		Summary: "Campaign/Resign/Observe, 4 processes: one leader at a time, resign hands over at once, a kill -9ed leader is replaced after its lease; terms rise",
	},
	{
		Name: primJobs, Lease: primJob.LockAtMost, Hold: 40 * time.Millisecond, Prim: primJobs, Iterations: 6,
		Summary: "RunJob every second in 3 processes: one run per tick; the plain TryAcquire pattern beside it runs some ticks twice",
	},
	{
		Name: "failover", Lease: failoverLease, Hold: failoverHold, Renew: failoverRenew,
		Failover: lockSentinel, Failovers: defaultFailovers, StallFor: failoverStall, SQLStore: true,
		Summary: "lock on a Sentinel group, master kill -9ed under a holder while replicas lag: may be lost silently without --replica-ack; the fence holds",
	},
	{
		Name: "cluster-failover", Lease: failoverLease, Hold: failoverHold, Renew: failoverRenew,
		Failover: lockCluster, Failovers: defaultFailovers, StallFor: failoverStall, SQLStore: true,
		Summary: "the same on a Cluster (3 masters, a replica each): the key's master kill -9ed",
	},
}

// The failover scenarios' timing. The victim holds a lease of
// failoverLease, renewed every failoverRenew; the master stalls the
// replicas, waits failoverStall and kill -9s the master. Without
// --replica-ack, the renewals in the stall count, so the holder believes in
// a lease that the promoted replica (which has the lease as of the stall)
// ends earlier; with it, they do not, and the holder is told at its local
// deadline. The lease outlasts a failover (2-3 s here), so that a lost lock
// can show.
const (
	failoverLease    = 4 * time.Second
	failoverRenew    = time.Second
	failoverHold     = 100 * time.Millisecond
	failoverStall    = 2 * time.Second
	defaultFailovers = 3
)

// isFailover reports whether s is a failover scenario.
func (s Scenario) isFailover() bool { return s.Failover != "" }

// Lookup returns the scenario called name.
func Lookup(name string) (Scenario, bool) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Names returns the scenario names, in order.
func Names() []string {
	names := make([]string, len(Scenarios))
	for i, s := range Scenarios {
		names[i] = s.Name
	}
	return names
}

// ParseScenarios parses a --scenario value: a name, a comma-separated list
// of names, or "all".
func ParseScenarios(value string) ([]Scenario, error) {
	if value == "all" {
		return append([]Scenario(nil), Scenarios...), nil
	}
	var out []Scenario
	seen := map[string]bool{}
	for _, name := range strings.Split(value, ",") {
		name = strings.TrimSpace(name)
		s, ok := Lookup(name)
		if !ok {
			return nil, fmt.Errorf("invalid --scenario %q: want one of %s, all (or a comma-separated list)",
				name, strings.Join(Names(), ", "))
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, s)
		}
	}
	return out, nil
}
