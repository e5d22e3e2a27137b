package fencelock

import "github.com/fencelock/fencelock/driver"

// The contract between a Client and its store is package driver's. The
// names below are that package's, under the names a Client has always
// given them.

// Backend is the store a Client keeps its locks in (see driver.Backend).
type Backend = driver.Backend

// ReleaseNotifier is a backend that tells waiters of releases at once (see
// driver.ReleaseNotifier).
type ReleaseNotifier = driver.ReleaseNotifier

// ChangeNotifier is a ReleaseNotifier that also tells of acquisitions (see
// driver.ChangeNotifier).
type ChangeNotifier = driver.ChangeNotifier

// Watch is a registration for release (or change) notifications of one
// lock (see driver.Watch).
type Watch = driver.Watch

// NewWatch makes a Watch that delivers on c and calls stop (once) when the
// watch is stopped (see driver.NewWatch).
func NewWatch(c <-chan struct{}, stop func()) *Watch { return driver.NewWatch(c, stop) }

// NewGrantWatch is NewWatch for a FairGranter's WatchTurn (see
// driver.NewGrantWatch).
func NewGrantWatch(c <-chan struct{}, stop func(), take func() (Grant, bool)) *Watch {
	return driver.NewGrantWatch(c, stop, take)
}

// LockRef names one hold of a lock (see driver.LockRef).
type LockRef = driver.LockRef

// AcquireRequest is one acquire attempt (see driver.AcquireRequest).
type AcquireRequest = driver.AcquireRequest

// AcquireResult is the outcome of one acquire attempt (see
// driver.AcquireResult).
type AcquireResult = driver.AcquireResult

// ReleaseRequest gives up one hold (see driver.ReleaseRequest).
type ReleaseRequest = driver.ReleaseRequest

// ReleaseResult is the outcome of a release (see driver.ReleaseResult).
type ReleaseResult = driver.ReleaseResult

// RenewRequest extends one hold's lease (see driver.RenewRequest).
type RenewRequest = driver.RenewRequest

// RenewResult is the outcome of renewing one hold (see driver.RenewResult).
type RenewResult = driver.RenewResult

// Checker is a backend that can check, before any lock is taken, that it
// can serve a Client (see driver.Checker).
type Checker = driver.Checker

// FairBackend is a backend that keeps a line of waiters for each lock, for
// WithFairness (see driver.FairBackend).
type FairBackend = driver.FairBackend

// FairGranter is a FairBackend whose release hands the free lock to the
// first waiter in line (see driver.FairGranter).
type FairGranter = driver.FairGranter

// Grant is a lock a release handed to a fair waiter (see driver.Grant).
type Grant = driver.Grant

// HandOffBackend is a backend whose release can hand the lock it frees to
// another acquire request in the same step (see driver.HandOffBackend).
type HandOffBackend = driver.HandOffBackend

// JobTickBackend is a backend that keeps, for each job, a record of the
// last tick claimed, for RunJob (see driver.JobTickBackend).
type JobTickBackend = driver.JobTickBackend

// TickRequest is one attempt to take a job's lock for a run of one tick
// (see driver.TickRequest).
type TickRequest = driver.TickRequest

// TickResult is the outcome of one AcquireTick (see driver.TickResult).
type TickResult = driver.TickResult

// LockInspector is a backend that can report the state of any lock by its
// name, for Inspect and ForceRelease (see driver.LockInspector).
type LockInspector = driver.LockInspector

// SemaphoreBackend is a backend that keeps semaphores (see
// driver.SemaphoreBackend).
type SemaphoreBackend = driver.SemaphoreBackend

// PermitRequest is one attempt to take a permit of a semaphore (see
// driver.PermitRequest).
type PermitRequest = driver.PermitRequest

// RWLockBackend is a backend that keeps read-write locks (see
// driver.RWLockBackend).
type RWLockBackend = driver.RWLockBackend

// RWRequest is one attempt to take a read-write lock (see
// driver.RWRequest).
type RWRequest = driver.RWRequest
