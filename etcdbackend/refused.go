package etcdbackend

import (
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/driver"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/status"
)

// refusals are etcd's replies that refuse the client itself, which no
// retry can change (driver.ErrMisconfigured): a wrong password when the
// client logs in again (its token expired), no user at all on a cluster
// with authentication on, and a user whose roles do not let it at the
// keys. (An expired or invalid token is not among them: the etcd client
// logs in again by itself.)
var refusals = []error{rpctypes.ErrAuthFailed, rpctypes.ErrUserEmpty, rpctypes.ErrPermissionDenied}

// refused reports whether err is one of the refusals, as the etcd client
// returns it or as a raw gRPC status (the keep-alive stream's).
func refused(err error) bool {
	if err == nil {
		return false
	}
	var grpcErr interface{ GRPCStatus() *status.Status }
	if errors.As(err, &grpcErr) {
		if e, ok := grpcErr.(error); ok {
			err = errors.Join(err, rpctypes.Error(e))
		}
	}
	for _, r := range refusals {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}

// misconfigured marks a refusal with driver.ErrMisconfigured, so that the
// Client stops at once instead of retrying, and with driver.ErrNotSent:
// etcd refuses a request as a whole, applying none of it (a lease granted
// before a refused transaction is revoked by the Backend). Other errors,
// and errors already marked, are returned as they are.
func misconfigured(err error) error {
	if !refused(err) || errors.Is(err, driver.ErrMisconfigured) {
		return err
	}
	return &refusalError{err}
}

// refusalError is a refusal by etcd (misconfigured). It reads as
// driver.ErrMisconfigured's message and etcd's, and matches
// driver.ErrMisconfigured, driver.ErrNotSent and etcd's error.
type refusalError struct{ err error }

// Error reads as driver.ErrMisconfigured's message, then etcd's.
func (e *refusalError) Error() string {
	return fmt.Sprintf("%v: %v", driver.ErrMisconfigured, e.err)
}

// Is reports whether target is driver.ErrMisconfigured or
// driver.ErrNotSent.
func (e *refusalError) Is(target error) bool {
	return target == driver.ErrMisconfigured || target == driver.ErrNotSent
}

// Unwrap returns etcd's error.
func (e *refusalError) Unwrap() error { return e.err }

// misconfiguredResults is misconfigured for the per-hold errors of a
// renewal batch.
func misconfiguredResults(results []driver.RenewResult) []driver.RenewResult {
	for i := range results {
		results[i].Err = misconfigured(results[i].Err)
	}
	return results
}
