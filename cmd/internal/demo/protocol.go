package demo

import (
	"encoding/json"
	"time"
)

// WorkerEnv names the environment variable through which the master hands a
// worker process its configuration (JSON). A process started with it set
// runs WorkerMain. The fencelock command runs workers as
// "fencelock demo-worker"; tests re-execute their own binary.
const WorkerEnv = "FENCELOCK_DEMO_WORKER"

// workerConfig is what a worker process needs. Durations are in
// nanoseconds (encoding/json's representation of time.Duration).
type workerConfig struct {
	ID         int           `json:"id"`
	RedisURL   string        `json:"redis_url"`
	Namespace  string        `json:"namespace"` // the lock client's namespace; the demo's own keys live under it too
	Key        string        `json:"key"`       // the lock key, also the fenced resource's name
	Scenario   string        `json:"scenario"`
	Lease      time.Duration `json:"lease"`
	Hold       time.Duration `json:"hold"`
	Renew      time.Duration `json:"renew"`
	IgnoreLoss bool          `json:"ignore_loss"`
	Iterations int           `json:"iterations"`
	MaxWait    time.Duration `json:"max_wait"` // bound of one Acquire
	Store      storeConfig   `json:"store"`
	Verbose    bool          `json:"verbose"`

	// Failover scenarios: the lock lives on Lock (RedisURL, the referee,
	// keeps only the demo's own keys); the worker iterates until the
	// master says "stop" (Iterations is 0), and the worker that enters
	// when the master asks for a victim holds on until "release FENCE".
	Lock         lockConfig `json:"lock,omitempty"`
	UntilStopped bool       `json:"until_stopped,omitempty"`

	// Fair: the fair scenario's worker (fair_worker.go), which runs
	// goroutines in runs the master starts and ends, instead of Iterations.
	Fair *fairWorkerConfig `json:"fair,omitempty"`

	// Prim: a primitives scenario's worker (prims_worker.go): goroutines
	// taking semaphore permits, read-write holds, leaderships or job runs
	// until the master says "end", instead of Iterations.
	Prim *primWorkerConfig `json:"prim,omitempty"`
}

// lockConfig says where a worker's lock lives. The zero value: on the
// demo's Redis (RedisURL).
type lockConfig struct {
	Kind              string        `json:"kind,omitempty"`        // "", lockSentinel, lockCluster, backendLock
	MasterName        string        `json:"master_name,omitempty"` // sentinel: the monitored master's name
	Addrs             []string      `json:"addrs,omitempty"`       // sentinel: the sentinels; cluster: every node
	ReplicaAck        int           `json:"replica_ack,omitempty"` // redisbackend.WithReplicaAck replicas; 0: off
	ReplicaAckTimeout time.Duration `json:"replica_ack_timeout,omitempty"`

	// backendLock: the Backend's name and its store's Config.
	Backend string          `json:"backend,omitempty"`
	Config  json.RawMessage `json:"config,omitempty"`
}

// Where a failover scenario's lock lives.
const (
	lockSentinel = "sentinel" // a private Sentinel group: 1 master, 2 replicas, 3 sentinels
	lockCluster  = "cluster"  // a private Cluster: 3 masters with a replica each
)

// storeConfig says which fenced store a worker writes to.
type storeConfig struct {
	Kind   string `json:"kind"`             // redis, sqlite, postgres
	Prefix string `json:"prefix,omitempty"` // redis: key prefix
	DSN    string `json:"dsn,omitempty"`    // sqlite, postgres: database/sql data source
	Table  string `json:"table,omitempty"`  // sqlite, postgres
}

// event is one line a worker prints on its stdout. The master reads them
// as they come; a worker killed mid-line just leaves a line that does not
// parse, which the master ignores.
type event struct {
	Ev   string      `json:"ev"` // ready, step, iter, done, fatal; run-done (fair, primitives); hold (primitives)
	Pid  int         `json:"pid,omitempty"`
	Iter *iterRecord `json:"rec,omitempty"`  // step (the iteration so far) and iter (complete)
	Hold *primHold   `json:"hold,omitempty"` // hold: a primitives worker's hold, once it ended
	Err  string      `json:"err,omitempty"`  // fatal
}

// Outcomes of an iteration.
const (
	outcomeCompleted   = "completed"   // every step ran
	outcomeInterrupted = "interrupted" // Redis went away (restart): counted apart, not a failure
	outcomeFailed      = "failed"      // an unexpected error
	outcomeKilled      = "killed"      // set by the master for the iteration a kill -9 cut short
)

// iterRecord is what a worker reports about one iteration. Times are
// CLOCK_MONOTONIC nanoseconds (see mono), comparable across processes.
type iterRecord struct {
	Worker int   `json:"worker"` // set by the master
	Iter   int   `json:"iter"`
	Fence  int64 `json:"fence,omitempty"`

	AcquireStart int64 `json:"acquire_start"`
	Acquired     int64 `json:"acquired,omitempty"` // when Acquire returned the lock: the start of the hold interval

	EnterRan bool  `json:"enter_ran,omitempty"` // the entry script ran in the current epoch
	EnterN   int64 `json:"enter_n,omitempty"`   // its INCR result: must be 1
	ExitRan  bool  `json:"exit_ran,omitempty"`  // the exit script ran in the same epoch
	ExitN    int64 `json:"exit_n,omitempty"`    // its DECR result: must be 0

	Writes []writeRecord `json:"writes,omitempty"`

	Exited             int64  `json:"exited,omitempty"` // before Release: the end of the hold interval
	ReleaseStart       int64  `json:"release_start,omitempty"`
	ReleaseEnd         int64  `json:"release_end,omitempty"`         // Release returned
	Released           bool   `json:"released,omitempty"`            // Release freed the lock (it still held it)
	ReleaseErr         string `json:"release_err,omitempty"`         // Release's error, when it failed
	ReleaseUnconfirmed bool   `json:"release_unconfirmed,omitempty"` // Release could not reach the server (ErrUnavailable): retried in the background, not a loss

	// Victim: the master picked this hold for a failover; it went on past
	// the hold time until the master released it or the lock was lost.
	Victim bool `json:"victim,omitempty"`
	// ToldAt is when the lock's Done channel closed with ErrLost before
	// Release was called (a goroutine waiting on Done stamped it: when the
	// holder could first have known); 0 if it was not told before.
	ToldAt  int64  `json:"told_at,omitempty"`
	LostErr string `json:"lost_err,omitempty"` // the lock's Err when it was told

	// StallFrom and StallFor: the longest the worker process went without
	// being run during the hold (the largest gap between two ticks of a
	// goroutine that wakes every stallTick), and when it began. A SIGSTOP
	// shows here too.
	StallFrom int64 `json:"stall_from,omitempty"`
	StallFor  int64 `json:"stall_for,omitempty"`

	LostBeforeRelease bool `json:"lost_before_release,omitempty"` // Done had fired with ErrLost before Release was called
	LostAtEnd         bool `json:"lost_at_end,omitempty"`         // Err matched ErrLost after Release (also when Release found it gone)

	Outcome string `json:"outcome"`
	Err     string `json:"err,omitempty"`
}

// Write results.
const (
	writeOK    = "ok"
	writeStale = "stale" // refused by the store: fence.ErrStale
	writeError = "error"
)

// writeRecord is one write to the fenced store.
type writeRecord struct {
	Phase   string `json:"phase"` // enter, exit
	Fence   int64  `json:"fence"`
	Start   int64  `json:"start"`
	End     int64  `json:"end"`
	Result  string `json:"result"`
	Current int64  `json:"current,omitempty"` // stale: the token the store had accepted
	Err     string `json:"err,omitempty"`
}

// holderValue is what a worker stores in the holder key while inside:
// "pid worker fence".
type holderValue struct {
	Pid, Worker int
	Fence       int64
}
