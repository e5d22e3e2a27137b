package fencelock

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/lease"
)

// SetMaxObserveWait sets how long Observe goes without looking, for one
// test; cleanup restores it.
func SetMaxObserveWait(t testing.TB, d time.Duration) {
	old := maxObserveWait
	maxObserveWait = d
	t.Cleanup(func() { maxObserveWait = old })
}

// The lease keeper's bounds, for its tests (package fencelock_test), which
// check batch sizes and calls in flight against them.
const (
	MaxRenewBatch   = lease.MaxRenewBatch
	MaxRenewWorkers = lease.MaxRenewWorkers
)

// KeeperPokes returns how many times the lease keeper's loop was woken
// before its planned look.
func KeeperPokes(c *Client) int64 { return c.leases.Pokes() }

// Defaults and limits the package keeps to itself, for its tests.
const (
	DefaultMaxFailures         = defaultMaxFailures
	DefaultSafetyMargin        = defaultSafetyMargin
	JobRecordLifeWithoutPeriod = jobRecordLifeWithoutPeriod
	MaxIdentityLen             = maxIdentityLen
	ElectionLockPrefix         = electionLockPrefix
	JobLockPrefix              = jobLockPrefix
)

// DefaultIdentity and OwnerFromContext, for the package's tests.
var (
	DefaultIdentity  = defaultIdentity
	OwnerFromContext = ownerFromContext
)
