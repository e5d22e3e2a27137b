package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// The refusals as the etcd client returns them, as raw gRPC statuses (the
// keep-alive stream), and wrapped, are marked; other errors, among them
// the expired token the etcd client logs in again for, are not. (A wrong
// password shows only when the client logs in again after its token
// expired, which TestRefusedByEtcd cannot wait for: here.)
func TestRefusedClassification(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{rpctypes.ErrAuthFailed, true},
		{rpctypes.ErrUserEmpty, true},
		{rpctypes.ErrPermissionDenied, true},
		{rpctypes.ErrGRPCAuthFailed, true},
		{rpctypes.ErrGRPCPermissionDenied, true},
		{fmt.Errorf("%w: granting a lease of 5s: %w", fencelock.ErrNotSent, rpctypes.ErrUserEmpty), true},
		{rpctypes.ErrInvalidAuthToken, false},
		{rpctypes.ErrGRPCInvalidAuthToken, false},
		{rpctypes.ErrNoLeader, false},
		{context.DeadlineExceeded, false},
		{nil, false},
	} {
		err := misconfigured(tc.err)
		if got := errors.Is(err, fencelock.ErrMisconfigured); got != tc.want {
			t.Errorf("misconfigured(%v) = %v: matches ErrMisconfigured %v, want %v", tc.err, err, got, tc.want)
		}
		if tc.err != nil && !errors.Is(err, tc.err) {
			t.Errorf("misconfigured(%v) = %v: no longer matches the error", tc.err, err)
		}
	}
}
