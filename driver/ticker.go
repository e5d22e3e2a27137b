package driver

import "context"

// Ticker is implemented by stores that keep, for each job, a record of the
// last tick claimed, written in the same step as the acquisition of a run
// (Client.RunJob). The rules of JobTickBackend hold.
type Ticker interface {
	// AcquireTick is Acquire of a KindLock that also records req.Tick by
	// req.Token for req.RecordLife, in one atomic step; it is refused
	// (Claimed) when the record names Tick or a later tick.
	AcquireTick(ctx context.Context, req TickRequest) (TickResult, error)
}
