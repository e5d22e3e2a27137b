// Package lockmodel is a model-based test of every feature of the
// fencelock Client together: a state machine that drives random
// interleavings of acquires (plain, fair, re-entrant, waiting, renewed,
// bounded), Do, semaphore and read-write holds, run-once jobs, elections,
// releases by the holder, by token and by force, Refresh, TTL, Close, time
// and backend faults, across several Clients with several goroutines each,
// and checks after every step what must hold whatever the interleaving:
//
//   - at most one owner believes it holds a lock (Permits for a semaphore,
//     one writer and no reader for a read-write lock), counting the holders
//     not yet told of a loss whose local deadline has not passed;
//   - every holder that believes it holds has a live hold on the store whose
//     lease ends no earlier than its local deadline;
//   - fences strictly increase per lock: an acquisition's fence is above
//     every fence returned before its call began, and never reused;
//   - no valid call gets an error matching ErrInvalidArgument, and every
//     error is one of the documented kinds;
//   - a holder told of nothing at its local deadline is a late keeper;
//     a holder released by token or by force is told at once by its own
//     Client, and by another within its renewal interval;
//   - a hold no live Client owns is gone by its lease end;
//   - a job's tick runs at most once across every Client;
//   - liveness: a lock that is free while a waiter is eligible for it is
//     taken within a bound (at once for plain waiters and permits, which
//     are woken by the release or by their fallback timer cut at the
//     holder's lease; a place lease for fair and read-write waiters).
//
// The machine is written once, here, for every store: the memory backend
// under testing/synctest (exact virtual time, fault injection), and real
// servers (Redis, Redlock, etcd) in real time with tolerances. It lives in
// an internal package of the root module: Go allows an internal package to
// be imported from any package whose path is below its parent, and the
// etcdbackend module's path is, so etcdbackend's tests import it as they
// already import testing/servertest.
//
// Steps are plain data (Step), so a shrunk counterexample is pasted into a
// named regression test that calls Replay.
//
// It is the test harness of fencelock's own modules (the library, cmd,
// etcdbackend, fencelockprom), public so that each of them can use it; it
// is not part of the library's API, and no library package imports it.
package lockmodel

import (
	"flag"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"pgregory.net/rapid"
)

// Family is a kind of lock on the store: the plain lock, a semaphore, a
// read-write lock. Each has its own holds and fence counter per key.
type Family uint8

const (
	FamLock Family = iota // the plain lock (Acquire, Do, RunJob, Campaign)
	FamSem                // a semaphore's permits
	FamRW                 // a read-write lock's read and write holds
)

func (f Family) String() string {
	switch f {
	case FamSem:
		return "semaphore"
	case FamRW:
		return "rwlock"
	default:
		return "lock"
	}
}

// Hold is one live hold on the store, as a Store reports it.
type Hold struct {
	Token string
	End   time.Time // when its lease ends, by the store's clock
	Write bool      // a read-write lock's write hold
}

// View is what the store has for one lock.
type View struct {
	Holds   []Hold
	Counter int64 // the last fence minted; 0 when unknown
	// WriterMark is a read-write lock's writer as the store marks it (a
	// real server's view tells the write hold by it).
	WriterMark string
}

// Store is the lock store of one check.
type Store interface {
	// Backend returns a store for a new Client. The Client closes it;
	// the store stays usable.
	Backend() driver.Store
	// Namespace is the namespace of the check's Clients ("" for the
	// default).
	Namespace() string
	// View reports the live holds of the lock of family fam named key;
	// ok is false when the store cannot tell.
	View(fam Family, key string) (v View, ok bool)
	// Close ends the store, after every Client is closed.
	Close()
}

// FaultKind is a failure of the store's calls (Faulter).
type FaultKind uint8

const (
	FaultLoseReply    FaultKind = iota // the request is applied, its reply lost
	FaultReplyDelay                    // the reply comes Delay late
	FaultRequestDelay                  // the request lands Delay late (applied even if its caller gave up)
	FaultRefuse                        // the store cannot be reached: nothing is applied
	FaultPause                         // the store stops: requests wait, applied when it resumes
)

// FaultOps are the calls a fault hits.
type FaultOps uint8

const (
	FaultAllOps FaultOps = iota
	FaultAcquire
	FaultRelease
	FaultRenew
	FaultTTL
)

// Faulter is implemented by stores that can inject faults.
type Faulter interface {
	// Inject starts f; clear ends it.
	Inject(f Fault) (clear func())
}

// Fault is a failure of the store, for Faulter.
type Fault struct {
	Kind  FaultKind
	Ops   FaultOps
	Delay time.Duration // FaultReplyDelay, FaultRequestDelay
	Times int           // calls it hits before it goes (0: until cleared)
}

// Partitioner is implemented by a Store's Backends that can be cut off
// from the store (OpPartition): their requests fail, unapplied, while the
// other Clients' go on.
type Partitioner interface {
	Cut(on bool)
}

// Features are the operations a store supports beyond the plain lock,
// Do, RunJob, Campaign, Release, Refresh, TTL, ReleaseToken and Close.
type Features uint16

const (
	Semaphores Features = 1 << iota
	RWLocks
	Fairness
	Inspect    // ForceRelease
	Faults     // the store implements Faulter
	Partitions // the store's Backends implement Partitioner
)

// Target is what the machine runs against: a store and how to use it.
type Target struct {
	Name string
	// Virtual runs every check in a testing/synctest bubble: time is
	// virtual and exact, and every goroutine settles before the checks.
	// Otherwise the machine runs in real time, with Tolerance.
	Virtual bool
	// NewStore makes the store of one check (inside its bubble when
	// Virtual).
	NewStore func(t TB) Store
	Features Features
	// Clients is the number of worker Clients (2 or 3). An operator
	// Client, never closed, issues some ReleaseToken and ForceRelease.
	Clients int
	// TTLs are the leases drawn; Waits the WithWait bounds; Advances the
	// steps of time; Cuts how long a partition lasts.
	TTLs, Waits, Advances, Cuts []time.Duration
	// Job is the run-once job of every RunJob (its Name is set by the
	// machine).
	Job fencelock.Job
	// Permits is the semaphore's number of permits.
	Permits int
	// Tolerance is, in real time, the slack every bound gets for a busy
	// machine (waking a goroutine, a round trip under load).
	Tolerance time.Duration
	// Checks and Steps are the default number of checks and of steps per
	// check, when -rapid.checks and -rapid.steps are not given.
	Checks, Steps int
}

// TB is what the machine needs of a test: *testing.T and *rapid.T.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
	Failed() bool
}

// Run runs the model against tg: rapid draws the steps of each check, and
// shrinks a failing sequence to a short one, printed as Go code for Replay.
func Run(t *testing.T, tg Target) {
	t.Helper()
	restore := defaultFlags(map[string]string{"rapid.checks": strconv.Itoa(tg.Checks), "rapid.steps": strconv.Itoa(tg.Steps)})
	defer restore()
	if !tg.Virtual {
		// A run in real time does not replay: a fail file is of no use.
		defer defaultFlags(map[string]string{"rapid.nofailfile": "true"})()
	}
	run(t, tg)
}

// RunParts runs the model's checks in parts parallel subtests of t, each
// against a target of its own that target makes (on a server of its own,
// say), together as many checks of as many steps as Run makes: for a
// target in real time, whose checks spend most of their time waiting on
// leases and the network. The first part runs against the target made for
// t itself, which also gives the counts. Each part runs ceil(checks /
// parts) checks (rapid's flags are global, so the parts share one count);
// the number of parts is lowered so that none runs empty.
func RunParts(t *testing.T, parts int, target func(t *testing.T) Target) {
	t.Helper()
	first := target(t)
	restore := defaultFlags(map[string]string{"rapid.checks": strconv.Itoa(first.Checks), "rapid.steps": strconv.Itoa(first.Steps)})
	if !first.Virtual {
		restore = chain(restore, defaultFlags(map[string]string{"rapid.nofailfile": "true"}))
	}
	checks := flag.Lookup("rapid.checks")
	total, _ := strconv.Atoi(checks.Value.String())
	parts = max(1, min(parts, total))
	each := (total + parts - 1) / parts
	parts = (total + each - 1) / each
	given := checks.Value.String()
	checks.Value.Set(strconv.Itoa(each))
	// The parts read the flags until they end, after this function
	// returns: cleanup, which runs after every subtest, restores them.
	t.Cleanup(func() {
		checks.Value.Set(given)
		restore()
	})
	t.Logf("%s: %d checks in %d parallel parts of at most %d", first.Name, total, parts, each)
	for i := range parts {
		t.Run(fmt.Sprintf("part%d", i+1), func(t *testing.T) {
			t.Parallel()
			tg := first
			if i > 0 {
				tg = target(t)
			}
			run(t, tg)
		})
	}
}

// chain returns a func that calls second, then first.
func chain(first, second func()) func() {
	return func() {
		second()
		first()
	}
}

// run is Run once the flags are set.
func run(t *testing.T, tg Target) {
	t.Helper()
	n, _ := strconv.Atoi(flag.Lookup("rapid.steps").Value.String())
	var checks, steps atomic.Int64
	start := time.Now()
	defer func() {
		t.Logf("%s: %d checks, %d steps in %v", tg.Name, checks.Load(), steps.Load(), time.Since(start).Round(time.Millisecond))
	}()
	rapid.Check(t, func(rt *rapid.T) {
		body := func(rt *rapid.T) {
			m := newMachine(rt, tg)
			defer func() {
				checks.Add(1)
				steps.Add(int64(len(m.steps)))
			}()
			defer m.teardown()
			// A fixed number of steps (rapid shrinks those that do not
			// matter to OpNop, which FormatSteps leaves out), so that a
			// run makes checks × steps of them.
			for range n {
				m.exec(drawStep(rt, m))
			}
		}
		if tg.Virtual {
			rapid.SyncTest(rt, body)
		} else {
			body(rt)
		}
	})
}

// Replay runs steps against tg, checking the model after each: a
// counterexample Run found, as a regression test.
func Replay(t *testing.T, tg Target, steps []Step) {
	t.Helper()
	body := func(t *testing.T) {
		m := newMachine(t, tg)
		defer m.teardown()
		for _, s := range steps {
			m.exec(s)
		}
	}
	if tg.Virtual {
		synctest.Test(t, body)
	} else {
		body(t)
	}
}

// defaultFlags sets the named flags that the command line did not set,
// and returns a func that restores them.
func defaultFlags(values map[string]string) (restore func()) {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var undo []func()
	for name, v := range values {
		f := flag.Lookup(name)
		if f == nil || set[name] || v == "" || v == "0" {
			continue
		}
		old := f.Value.String()
		f.Value.Set(v)
		undo = append(undo, func() { f.Value.Set(old) })
	}
	return func() {
		for _, u := range undo {
			u()
		}
	}
}
