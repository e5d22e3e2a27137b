// Package driver is the contract between a fencelock.Client and the store
// that keeps its locks, as database/sql/driver is for database/sql. Users of
// fencelock do not need it: they pass a store (redisbackend.New(rdb), an
// etcd or Redlock backend) to fencelock.New. Authors of stores implement it.
//
// Every method makes one attempt in one round trip and is safe for
// concurrent use. The errors a store returns are this package's (ErrNotSent,
// ErrMisconfigured, ErrNotHeld, ...); the fencelock package re-exports the
// same values. The drivertest package checks a store against the contract.
//
// The package imports only the standard library, so that a store depends on
// the contract and not on the Client.
package driver
