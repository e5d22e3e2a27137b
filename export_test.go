package fencelock

// The lease keeper's bounds, for its tests (package fencelock_test), which
// check batch sizes and calls in flight against them.
const (
	MaxRenewBatch   = maxRenewBatch
	MaxRenewWorkers = maxRenewWorkers
)
