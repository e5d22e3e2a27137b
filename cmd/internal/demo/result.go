package demo

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Statuses of a scenario.
const (
	StatusPass = "PASS"
	StatusFail = "FAIL"
	StatusSkip = "SKIP"
)

// Millis is a duration in milliseconds (JSON: a number).
type Millis float64

func millis(d time.Duration) Millis { return Millis(float64(d) / float64(time.Millisecond)) }

// nanos converts a difference of mono() readings.
func nanos(d int64) Millis { return Millis(float64(d) / 1e6) }

// String formats m for the table: seconds above 1s, milliseconds below.
func (m Millis) String() string {
	switch {
	case m >= 10000:
		return fmt.Sprintf("%.1fs", float64(m)/1000)
	case m >= 1000:
		return fmt.Sprintf("%.2fs", float64(m)/1000)
	case m >= 10:
		return fmt.Sprintf("%.0fms", float64(m))
	case m >= 1:
		return fmt.Sprintf("%.1fms", float64(m))
	default:
		return fmt.Sprintf("%.2fms", float64(m))
	}
}

// MarshalJSON rounds to microseconds.
func (m Millis) MarshalJSON() ([]byte, error) {
	return json.Marshal(math.Round(float64(m)*1000) / 1000)
}

// Result is what one scenario showed.
type Result struct {
	Scenario string   `json:"scenario"`
	Status   string   `json:"status"`            // PASS, FAIL or SKIP
	Reasons  []string `json:"reasons,omitempty"` // why it failed (or was skipped)
	Notes    []string `json:"notes,omitempty"`   // what is worth knowing about the run

	Expect     string `json:"expect"`
	Lease      Millis `json:"lease_ms"`
	Hold       Millis `json:"hold_ms"`
	Renew      Millis `json:"renew_ms"` // 0: no renewal
	Workers    int    `json:"workers"`
	Iterations int    `json:"iterations"` // per worker
	Store      string `json:"store"`      // the fenced store used

	Entered     int `json:"entered"`     // iterations that got the lock and marked themselves inside
	Completed   int `json:"completed"`   // iterations that ran every step
	Interrupted int `json:"interrupted"` // cut short by the Redis restart (not failures)
	Failed      int `json:"failed"`      // unexpected errors
	Killed      int `json:"killed"`      // cut short by the master's kill -9

	MaxConcurrent int `json:"max_concurrent"` // most hold intervals that overlapped (CLOCK_MONOTONIC)
	Violations    int `json:"violations"`     // INCR on entry not 1, or DECR on exit not 0
	LossSignals   int `json:"loss_signals"`   // iterations told ErrLost before they released

	Writes         int `json:"writes"`          // writes to the fenced store
	StaleAttempted int `json:"stale_attempted"` // writes with a fence older than one already accepted
	StaleAccepted  int `json:"stale_accepted"`  // ... that the store accepted: must be 0
	WriteErrors    int `json:"write_errors"`

	Acquisitions int   `json:"acquisitions"`
	FenceMin     int64 `json:"fence_min"`
	FenceMax     int64 `json:"fence_max"`

	Handoffs   int    `json:"handoffs"`       // a release followed by the next acquisition
	HandoffP50 Millis `json:"handoff_p50_ms"` // release called -> next Acquire returned
	HandoffP99 Millis `json:"handoff_p99_ms"`

	Pauses   []PauseResult    `json:"pauses,omitempty"`
	Kills    []KillResult     `json:"kills,omitempty"`
	Restart  *RestartResult   `json:"restart,omitempty"`
	Failover *FailoverSummary `json:"failover,omitempty"`
	Fair     *FairSummary     `json:"fair,omitempty"`
	Prim     *PrimSummary     `json:"primitive,omitempty"`

	// Verdict sums up what a failover scenario showed, in a sentence.
	Verdict string `json:"verdict,omitempty"`

	Elapsed Millis `json:"elapsed_ms"`
}

// PauseResult is one holder the master SIGSTOPped.
type PauseResult struct {
	Worker       int    `json:"worker"`
	Fence        int64  `json:"fence"`
	At           Millis `json:"at_ms"`        // since the start of the scenario
	Stopped      Millis `json:"stopped_ms"`   // how long it was stopped
	Free         Millis `json:"free_ms"`      // SIGSTOP -> the lease had run out on the server; -1 if not while stopped
	Takeover     Millis `json:"takeover_ms"`  // SIGSTOP -> another worker's Acquire returned; -1 if none did
	LossSignal   bool   `json:"loss_signal"`  // the paused holder's lock reported ErrLost
	LateWrites   int    `json:"late_writes"`  // its writes that started after SIGCONT
	LateRejected int    `json:"late_refused"` // ... refused by the store as stale
}

// KillResult is one holder the master kill -9ed.
type KillResult struct {
	Worker   int    `json:"worker"`
	Fence    int64  `json:"fence"`
	At       Millis `json:"at_ms"`
	Held     bool   `json:"held"`        // it died holding the lock
	Free     Millis `json:"free_ms"`     // SIGKILL -> the lease had run out on the server; -1 if not seen
	Takeover Millis `json:"takeover_ms"` // SIGKILL -> next Acquire returned; -1 if none did
}

// RestartResult is the kill -9 and restart of redis-server.
type RestartResult struct {
	At          Millis `json:"at_ms"`
	Down        Millis `json:"down_ms"`      // kill -9 -> the new server answered
	FenceBefore int64  `json:"fence_before"` // the largest fence acquired before the kill
	FenceAfter  int64  `json:"fence_after"`  // the smallest fence acquired after the restart

	// What was restarted: "redis-server", or the Backend's words.
	What string `json:"what"`
	// HolderFence is the fence of the worker inside when the servers were
	// killed (0: none seen). HeldAfter: the lock still carried it when
	// they answered again. Kept: its holder was never told of a loss, and
	// the lock was HeldAfter or released normally: the restart did not
	// lose it.
	HolderFence int64 `json:"holder_fence,omitempty"`
	HeldAfter   bool  `json:"held_after"`
	Kept        bool  `json:"kept"`
	lostHow     string
}

// FailoverSummary is what a failover scenario showed.
type FailoverSummary struct {
	Topology          string `json:"topology"`    // sentinel, cluster
	ReplicaAck        int    `json:"replica_ack"` // replicas each acquire and renewal waited for; 0: off
	ReplicaAckTimeout Millis `json:"replica_ack_timeout_ms,omitempty"`
	StallFor          Millis `json:"stall_ms"` // replicas stalled -> kill -9

	Planned int `json:"planned"`
	Done    int `json:"done"`

	LostSilently int `json:"lost_silently"` // another worker acquired while the victim still believed it held the lock
	Told         int `json:"told"`          // the victim was told (ErrLost) before anyone else acquired
	Kept         int `json:"kept"`          // the victim kept the lock through the failover

	FenceRegressions int `json:"fence_regressions"` // a fence not above one handed out earlier

	Releases int    `json:"releases"`     // releases followed by a waiting worker's acquire
	GhostP50 Millis `json:"ghost_p50_ms"` // release returned -> next Acquire returned
	GhostMax Millis `json:"ghost_max_ms"`

	NextAcquireMin    Millis `json:"next_acquire_min_ms"` // kill -9 -> the next Acquire returned
	NextAcquireMedian Millis `json:"next_acquire_median_ms"`
	NextAcquireMax    Millis `json:"next_acquire_max_ms"`

	Events []FailoverResult `json:"events"`
}

// FailoverResult is one failover.
type FailoverResult struct {
	N         int    `json:"n"`
	Victim    int    `json:"victim"` // the worker holding the lock
	Fence     int64  `json:"fence"`
	At        Millis `json:"at_ms"`      // the kill -9, since the start of the scenario
	Stalled   Millis `json:"stalled_ms"` // how long the replicas had been stalled at the kill
	Old       string `json:"old_master"`
	NewMaster string `json:"new_master"`
	Promotion Millis `json:"promotion_ms"` // kill -> the promotion was seen; -1 if not
	Rejoin    Millis `json:"rejoin_ms"`    // kill -> the old master a synced replica again; -1 if not

	Outcome    string `json:"outcome"`       // lost silently, told, kept
	Told       bool   `json:"told"`          // the victim was told of the loss (ErrLost) before it released
	ToldAfter  Millis `json:"told_after_ms"` // kill -> it was told (negative: before the kill)
	ToldHow    string `json:"told_how,omitempty"`
	TakenBy    int    `json:"taken_by"` // the worker that acquired during the victim's hold; -1 if none
	TakenFence int64  `json:"taken_fence,omitempty"`
	TakenAfter Millis `json:"taken_after_ms"` // kill -> that acquire; -1 if none

	NextAcquire Millis `json:"next_acquire_ms"` // kill -> the next Acquire returned; -1 if none
}

func newResult(sc Scenario, workers, iterations int) *Result {
	return &Result{
		Scenario: sc.Name, Status: StatusPass, Expect: sc.Summary,
		Lease: millis(sc.Lease), Hold: millis(sc.Hold), Renew: millis(sc.Renew),
		Workers: workers, Iterations: iterations,
	}
}

// fail marks r failed with a reason and returns it.
func (r *Result) fail(format string, args ...any) *Result {
	r.Status = StatusFail
	r.Reasons = append(r.Reasons, fmt.Sprintf(format, args...))
	return r
}
