package redisbackend

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock"
)

var _ fencelock.Checker = (*Backend)(nil)

// checkScript is the least a script can do: Check runs it to learn that the
// server runs Lua scripts (some managed Redis services refuse EVAL).
var checkScript = newScript(`return 1`)

// Check implements fencelock.Checker: an invalid option of the Backend
// (WithReplicaAck) or a namespace that would break the Cluster hash tag is
// an invalid argument; otherwise it sends PING and a one-line script, and
// returns the error if the server cannot be reached or refuses scripts.
func (b *Backend) Check(ctx context.Context, namespace string) error {
	if b.optErr != nil {
		return b.optErr
	}
	if err := checkNames(namespace, "key"); err != nil {
		return err
	}
	return guardErr(b, ctx, func(ctx context.Context) error {
		if err := b.rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redisbackend: PING: %w", err)
		}
		if err := b.scripts.run(ctx, b.rdb, checkScript, []string{"{fencelock-check}"}).Err(); err != nil {
			return fmt.Errorf("redisbackend: running a Lua script: %w", err)
		}
		return nil
	})
}

// guardErr is guard for a call that returns only an error.
func guardErr(b *Backend, ctx context.Context, f func(context.Context) error) error {
	_, err := guard(b, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, f(ctx) })
	return err
}
