package fencelock_test

import (
	"testing"
	"time"

	. "github.com/fencelock/fencelock/testing/lockmodel"
)

// replay runs steps, a counterexample the model found, on the memory
// backend.
func replay(t *testing.T, steps []Step) {
	t.Helper()
	Replay(t, Memory(), steps)
}

func TestModelForceReleaseLostReplyTellsOwnLock(t *testing.T) {
	replay(t, []Step{
		{Op: OpTryAcquire, TTL: 3 * time.Second},
		{Op: OpFault, Dur: 10 * time.Millisecond, Fault: Fault{Kind: FaultLoseReply, Ops: FaultRelease, Times: 1}},
		{Op: OpForceRelease},
	})
}

func TestModelReleaseTokenLostReplyTellsOwnLock(t *testing.T) {
	replay(t, []Step{
		{Op: OpTryAcquire, TTL: 3 * time.Second},
		{Op: OpFault, Dur: 10 * time.Millisecond, Fault: Fault{Kind: FaultLoseReply, Ops: FaultRelease, Times: 1}},
		{Op: OpReleaseToken},
	})
}

func TestModelJobRunReleasedByTokenRunsOnce(t *testing.T) {
	replay(t, []Step{
		{Op: OpRunJob},
		{Op: OpReleaseToken},
		{Op: OpRunJob},
	})
}

func TestModelRefreshShorterInFlightEndsBelief(t *testing.T) {
	replay(t, []Step{
		{Op: OpTryAcquire, TTL: 3 * time.Second},
		{Op: OpFault, Dur: time.Second, Fault: Fault{Kind: FaultReplyDelay, Ops: FaultRenew, Delay: 500 * time.Millisecond}},
		{Op: OpRefresh, TTL: 10 * time.Millisecond},
		{Op: OpAdvance, Dur: 100 * time.Millisecond},
		{Op: OpTryAcquire, Client: 1, TTL: 3 * time.Second},
	})
}

func TestModelJobRunForcedBeforeItBeganRunsOnce(t *testing.T) {
	replay(t, []Step{
		{Op: OpFault, Dur: 10 * time.Millisecond, Fault: Fault{Kind: FaultReplyDelay, Ops: FaultAcquire, Delay: 5 * time.Millisecond}},
		{Op: OpRunJob},
		{Op: OpForceRelease, Key: 2},
		{Op: OpRunJob},
		{Op: OpAdvance, Dur: 10 * time.Millisecond},
	})
}

func TestModelHandOffToOwnerWaiter(t *testing.T) {
	replay(t, []Step{
		{Op: OpAcquire, TTL: 3 * time.Second},
		{Op: OpAcquire, TTL: 3 * time.Second, Owner: 1},
		{Op: OpRelease},
	})
}

func TestModelForceReleaseSparesNextHolder(t *testing.T) {
	replay(t, []Step{
		{Op: OpTryAcquire, TTL: 3 * time.Second},
		{Op: OpAcquire, Client: 1, TTL: 3 * time.Second, Fair: true},
		{Op: OpForceRelease, Client: 3},
	})
}

func TestModelJobLateInstanceRunsOnce(t *testing.T) {
	replay(t, []Step{
		{Op: OpRunJob},
		{Op: OpFinish},
		{Op: OpAdvance, Dur: 500 * time.Millisecond},
		{Op: OpRunJob, Client: 1},
	})
}

func TestModelFairReentryLeavesLine(t *testing.T) {
	replay(t, []Step{
		{Op: OpAcquire, TTL: 10 * time.Millisecond, Fair: true},
		{Op: OpAcquire, TTL: 10 * time.Millisecond, Fair: true},
		{Op: OpAcquire, TTL: 10 * time.Millisecond, Owner: 1, Fair: true},
		{Op: OpAcquire, Client: 2, TTL: 3 * time.Second, Owner: 1, Fair: true},
		{Op: OpFault, Dur: 10 * time.Millisecond, Fault: Fault{Kind: FaultReplyDelay, Ops: FaultAcquire, Delay: 50 * time.Millisecond}},
		{Op: OpReleaseToken},
		{Op: OpAdvance, Dur: 10 * time.Millisecond},
		{Op: OpForceRelease},
		{Op: OpAdvance, Dur: 100 * time.Millisecond},
	})
}

func TestModelLateRenewalAfterLongerRefresh(t *testing.T) {
	replay(t, []Step{
		{Op: OpFault, Dur: 200 * time.Millisecond, Fault: Fault{Kind: FaultRequestDelay, Ops: FaultRenew, Delay: 500 * time.Millisecond}},
		{Op: OpAdvance, Dur: 100 * time.Millisecond},
		{Op: OpDo, Client: 1, Key: 1, TTL: 300 * time.Millisecond, Owner: 2, HasWait: true, Wait: 50 * time.Millisecond},
		{Op: OpAdvance, Dur: 100 * time.Millisecond},
		{Op: OpRefresh, Pick: 2, TTL: 1 * time.Second},
		{Op: OpAdvance, Dur: 2 * time.Second},
	})
}
