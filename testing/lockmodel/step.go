package lockmodel

import (
	"fmt"
	"strings"
	"time"

	"pgregory.net/rapid"
)

// Op is what a step does.
type Op uint8

const (
	OpNop          Op = iota
	OpAdvance         // let Dur pass
	OpAcquire         // Client.Acquire of plain key Key (waits, in a goroutine of its own)
	OpTryAcquire      // Client.TryAcquire
	OpDo              // Client.Do: fn holds the lock until OpFinish
	OpSemaphore       // a permit: Semaphore.Acquire, or TryAcquire with Try
	OpRWLock          // a read (or, with Write, write) hold, waiting or Try
	OpRunJob          // RunJob of the current tick (Pick 1: the previous tick); fn runs until OpFinish
	OpCampaign        // Campaign with an id of its own
	OpResign          // Resign leadership Pick
	OpRelease         // Release lock Pick
	OpRefresh         // Refresh lock Pick to TTL
	OpTTL             // TTL of lock Pick
	OpReleaseToken    // ReleaseToken of lock Pick's token, by Client (Clients: the operator)
	OpForceRelease    // ForceRelease of name Key (plain, job, election, semaphore, read-write), by Client
	OpFinish          // end fn Pick (Do, RunJob)
	OpCancel          // cancel the context of waiting call Pick
	OpClose           // Close Client
	OpOpen            // a new Client in slot Client, if closed
	OpFault           // inject Fault for Dur
	OpPartition       // cut Client off from the store for Dur
	numOps
)

var opNames = [...]string{"OpNop", "OpAdvance", "OpAcquire", "OpTryAcquire", "OpDo", "OpSemaphore", "OpRWLock",
	"OpRunJob", "OpCampaign", "OpResign", "OpRelease", "OpRefresh", "OpTTL", "OpReleaseToken", "OpForceRelease",
	"OpFinish", "OpCancel", "OpClose", "OpOpen", "OpFault", "OpPartition"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", o)
}

// Step is one step of the machine. Fields an Op does not use are zero.
type Step struct {
	Op     Op
	Client int           // a worker Client's slot; Target.Clients means the operator
	Key    int           // a plain key: 0 "a", 1 "b" (OpForceRelease also 2: the job's, 3: the election's, 4: the semaphore's, 5: the read-write lock's)
	Pick   int           // which lock, leadership, fn or call (modulo how many there are; recent first)
	TTL    time.Duration // the lease (OpRefresh: the new one)
	Dur    time.Duration // OpAdvance: how long; OpFault: how long the fault lasts

	Owner     int           // WithOwner("owner-N"); 0: none
	Fair      bool          // WithFairness
	Wait      time.Duration // WithWait(Wait) when HasWait
	HasWait   bool          //
	Renew     int           // WithAutoRenew: 0 none, 1 ttl/3, 2 ttl/2
	MaxHold   int           // WithMaxHold: 0 none, 1 ttl/2 (at least MinTTL), 2 2*ttl
	Try       bool          // OpSemaphore, OpRWLock: a single attempt
	Write     bool          // OpRWLock: the write hold
	Fault     Fault         // OpFault
	Scheduled int           // OpRunJob: 0 the current tick, 1 the previous one
}

// GoString formats s as a Go composite literal for a regression test.
func (s Step) GoString() string {
	var b strings.Builder
	b.WriteString("{Op: " + s.Op.String())
	f := func(name string, v any) { fmt.Fprintf(&b, ", %s: %v", name, v) }
	if s.Client != 0 {
		f("Client", s.Client)
	}
	if s.Key != 0 {
		f("Key", s.Key)
	}
	if s.Pick != 0 {
		f("Pick", s.Pick)
	}
	if s.TTL != 0 {
		f("TTL", goDuration(s.TTL))
	}
	if s.Dur != 0 {
		f("Dur", goDuration(s.Dur))
	}
	if s.Owner != 0 {
		f("Owner", s.Owner)
	}
	if s.Fair {
		f("Fair", true)
	}
	if s.HasWait {
		f("HasWait", true)
		f("Wait", goDuration(s.Wait))
	}
	if s.Renew != 0 {
		f("Renew", s.Renew)
	}
	if s.MaxHold != 0 {
		f("MaxHold", s.MaxHold)
	}
	if s.Try {
		f("Try", true)
	}
	if s.Write {
		f("Write", true)
	}
	if s.Scheduled != 0 {
		f("Scheduled", s.Scheduled)
	}
	if s.Op == OpFault {
		fmt.Fprintf(&b, ", Fault: Fault{Kind: %s, Ops: %s", s.Fault.Kind.goName(), s.Fault.Ops.goName())
		if s.Fault.Delay != 0 {
			fmt.Fprintf(&b, ", Delay: %s", goDuration(s.Fault.Delay))
		}
		if s.Fault.Times != 0 {
			fmt.Fprintf(&b, ", Times: %d", s.Fault.Times)
		}
		b.WriteString("}")
	}
	b.WriteString("}")
	return b.String()
}

func (k FaultKind) goName() string {
	return [...]string{"FaultLoseReply", "FaultReplyDelay", "FaultRequestDelay", "FaultRefuse", "FaultPause"}[k]
}

func (o FaultOps) goName() string {
	return [...]string{"FaultAllOps", "FaultAcquire", "FaultRelease", "FaultRenew", "FaultTTL"}[o]
}

// goDuration formats d as Go code: 300*time.Millisecond.
func goDuration(d time.Duration) string {
	switch {
	case d%time.Second == 0:
		return fmt.Sprintf("%d*time.Second", d/time.Second)
	case d%time.Millisecond == 0:
		return fmt.Sprintf("%d*time.Millisecond", d/time.Millisecond)
	default:
		return fmt.Sprintf("%d*time.Microsecond", d/time.Microsecond)
	}
}

// FormatSteps formats steps, without the no-ops, as the Go code of a
// []Step.
func FormatSteps(steps []Step) string {
	var b strings.Builder
	b.WriteString("[]lockmodel.Step{\n")
	for _, s := range steps {
		if s.Op != OpNop {
			b.WriteString("\t" + s.GoString() + ",\n")
		}
	}
	b.WriteString("}")
	return b.String()
}

// opWeights are how often each operation is drawn, relative to the others.
var opWeights = [numOps]int{
	OpNop: 1, OpAdvance: 14, OpAcquire: 10, OpTryAcquire: 5, OpDo: 5, OpSemaphore: 6, OpRWLock: 6,
	OpRunJob: 4, OpCampaign: 3, OpResign: 2, OpRelease: 10, OpRefresh: 3, OpTTL: 3, OpReleaseToken: 3,
	OpForceRelease: 3, OpFinish: 6, OpCancel: 3, OpClose: 1, OpOpen: 2, OpFault: 2, OpPartition: 4,
}

// supported reports whether the target's store can run op.
func (tg *Target) supported(op Op) bool {
	switch op {
	case OpSemaphore:
		return tg.Features&Semaphores != 0
	case OpRWLock:
		return tg.Features&RWLocks != 0
	case OpForceRelease:
		return tg.Features&Inspect != 0
	case OpFault:
		return tg.Features&Faults != 0
	case OpPartition:
		return tg.Features&Partitions != 0
	}
	return true
}

// drawStep draws the next step. Its fields are drawn whatever the state,
// so that a sequence replays as data; a step that names nothing existing
// (a release with no lock) does nothing.
func drawStep(t *rapid.T, m *machine) Step {
	tg := m.tg
	table := m.opTable
	op := table[uniform(t, len(table), "op")]
	s := Step{Op: op}
	switch op {
	case OpAdvance:
		s.Dur = rapid.SampledFrom(tg.Advances).Draw(t, "dur")
	case OpAcquire, OpTryAcquire, OpDo, OpSemaphore, OpRWLock, OpCampaign:
		s.Client = rapid.IntRange(0, tg.Clients-1).Draw(t, "client")
		s.TTL = rapid.SampledFrom(tg.TTLs).Draw(t, "ttl")
		s.Renew = rapid.IntRange(0, 2).Draw(t, "renew")
		s.MaxHold = rapid.IntRange(0, 5).Draw(t, "maxHold")
		if s.MaxHold > 2 {
			s.MaxHold = 0 // mostly none
		}
		if op != OpCampaign {
			s.Owner = rapid.IntRange(0, 3).Draw(t, "owner")
			if s.Owner == 3 {
				s.Owner = 0
			}
		}
		if op == OpAcquire || op == OpTryAcquire || op == OpDo {
			s.Key = rapid.IntRange(0, 1).Draw(t, "key")
			if tg.Features&Fairness != 0 {
				s.Fair = rapid.IntRange(0, 3).Draw(t, "fair") == 0
			}
		}
		if op == OpSemaphore || op == OpRWLock {
			s.Try = rapid.IntRange(0, 2).Draw(t, "try") == 0
		}
		if op == OpRWLock {
			s.Write = rapid.Bool().Draw(t, "write")
		}
		if op != OpTryAcquire && !s.Try {
			if w := rapid.IntRange(0, len(tg.Waits)).Draw(t, "wait"); w > 0 {
				s.HasWait, s.Wait = true, tg.Waits[w-1]
			}
		}
	case OpRunJob:
		s.Client = rapid.IntRange(0, tg.Clients-1).Draw(t, "client")
		if rapid.IntRange(0, 7).Draw(t, "late") == 0 {
			s.Scheduled = 1
		}
	case OpResign, OpRelease, OpTTL, OpFinish, OpCancel:
		s.Pick = rapid.IntRange(0, 7).Draw(t, "pick")
	case OpRefresh:
		s.Pick = rapid.IntRange(0, 7).Draw(t, "pick")
		s.TTL = rapid.SampledFrom(tg.TTLs).Draw(t, "ttl")
	case OpReleaseToken:
		s.Pick = rapid.IntRange(0, 7).Draw(t, "pick")
		s.Client = rapid.IntRange(0, tg.Clients).Draw(t, "client")
	case OpForceRelease:
		s.Key = rapid.IntRange(0, 5).Draw(t, "key")
		s.Client = rapid.IntRange(0, tg.Clients).Draw(t, "client")
	case OpClose, OpOpen:
		s.Client = rapid.IntRange(0, tg.Clients-1).Draw(t, "client")
	case OpPartition:
		s.Client = rapid.IntRange(0, tg.Clients-1).Draw(t, "client")
		s.Dur = rapid.SampledFrom(tg.Cuts).Draw(t, "cutDur")
	case OpFault:
		s.Fault.Kind = FaultKind(rapid.IntRange(0, int(FaultPause)).Draw(t, "fault"))
		s.Fault.Ops = FaultOps(rapid.IntRange(0, int(FaultTTL)).Draw(t, "faultOps"))
		s.Dur = rapid.SampledFrom([]time.Duration{10 * time.Millisecond, 200 * time.Millisecond, time.Second, 3 * time.Second}).Draw(t, "faultDur")
		switch s.Fault.Kind {
		case FaultReplyDelay, FaultRequestDelay:
			s.Fault.Delay = rapid.SampledFrom([]time.Duration{5 * time.Millisecond, 50 * time.Millisecond, 500 * time.Millisecond}).Draw(t, "delay")
		case FaultLoseReply:
			s.Fault.Times = rapid.IntRange(0, 2).Draw(t, "times")
		}
	}
	return s
}

// uniform draws an index below n, uniformly: rapid's integers favour
// small values, which would skew the operations' weights. It shrinks
// towards 0 (OpNop).
var opBits = rapid.Custom(func(t *rapid.T) int {
	v := 0
	for range 10 {
		v <<= 1
		if rapid.Bool().Draw(t, "bit") {
			v |= 1
		}
	}
	return v
})

func uniform(t *rapid.T, n int, label string) int {
	return opBits.Draw(t, label) * n >> 10
}

// buildOpTable lists the target's operations, each as often as its weight.
func buildOpTable(tg *Target) []Op {
	var table []Op
	for op := Op(0); op < numOps; op++ {
		if tg.supported(op) {
			for range opWeights[op] {
				table = append(table, op)
			}
		}
	}
	return table
}
