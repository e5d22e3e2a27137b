package driver

import (
	"context"
	"time"
)

// Ticker is implemented by stores that keep, for each job, a record of the
// last tick claimed, written in the same atomic step as the acquisition of
// a run (Client.RunJob). The lock alone cannot promise one run per tick:
// once a run's hold is gone, a late instance would find the job free and
// run the tick again. The record can: a tick it names, or any earlier one,
// is not run again while it lives.
//
// The record belongs to the lock named by Namespace and Key (one record
// per job, not per tick): it names a tick and the Token of the acquisition
// that claimed it, and lapses RecordLife after the step that wrote it.
// Ticks are compared as byte strings: a later tick is greater.
//
// AcquireTick is one atomic step:
//   - A Token with a tombstone (ReleaseRequest.Tombstone) is refused as by
//     Acquire: Acquired and Claimed false, nothing changed.
//   - A record that names Tick or a later tick refuses the attempt:
//     Claimed true, with the record's tick and token in LastTick and
//     LastToken, and nothing changed (no hold, and the lock is not marked
//     as waited for). The one exception is a record of this very claim
//     (Tick by this Token): its acquire's reply was lost, and no run began
//     under it, so the attempt goes on as below (a retry).
//   - Otherwise it is Acquire of req.Request, with every rule of Acquire
//     for a KindLock; a lock held by another owner (an earlier tick's run)
//     refuses the attempt with the holder's HolderTTL and is marked as
//     waited for, so that its release notifies waiters (Notifier).
//   - When, and only when, that takes or keeps a hold (Acquired), the
//     record is set to Tick and Token, to live RecordLife from now.
type Ticker interface {
	// AcquireTick makes one attempt to take the lock (a KindLock) for a run
	// of req.Tick and claim that tick. Like Acquire, a refusal is not an
	// error.
	AcquireTick(ctx context.Context, req TickRequest) (TickResult, error)
}

// TickRequest is one attempt to take a job's lock for a run of one tick.
type TickRequest struct {
	Request
	// Tick names the tick: not empty, and without a NUL byte. Ticks of a
	// job compare as byte strings, a later tick greater (the Client writes
	// the tick's UTC time with a fixed number of digits).
	Tick string
	// RecordLife is how long the record of the claim lives, at least (a
	// store may round it up): from the step that writes it.
	RecordLife time.Duration
}

// TickResult is the outcome of one AcquireTick.
type TickResult struct {
	// Result is the acquisition's result: Acquired with the run's fence,
	// or a refusal by the holder of the lock (HolderTTL), which is not
	// Claimed.
	Result
	// Claimed reports that the record names Tick or a later tick (not the
	// claim of Tick by this Token): the tick is not to run. Acquired is
	// then false.
	Claimed bool
	// LastTick and LastToken are the record's tick and token when Claimed.
	LastTick, LastToken string
}
