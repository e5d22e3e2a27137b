package redisbackend

import (
	"context"
	"fmt"
)

// checkScript is the least a script can do: Check runs it to learn that the
// server runs Lua scripts (some managed Redis services refuse EVAL).
var checkScript = newScript(luaScript("check.lua"))

// checkLock is the lock whose keys and channel Check uses, in the
// namespace checked: an ACL that lets a user at the namespace's keys and
// channels (~NS:* &NS:*) lets it at these.
const checkLock = "fencelock-check"

// Check implements driver.Store: an invalid option of the Backend
// (WithReplicaAck) or a namespace that would break the Cluster hash tag is
// an invalid argument; otherwise it sends PING, a one-line script on a key
// of the namespace, and a PUBLISH on a channel of the namespace (releases
// publish there when someone waits), and returns the error if the server
// cannot be reached, refuses scripts, or refuses the client's credentials
// or its user's permission for any of these (driver.ErrMisconfigured).
func (b *Backend) Check(ctx context.Context, namespace string) error {
	if b.optErr != nil {
		return b.optErr
	}
	if err := checkNames(namespace, "key"); err != nil {
		return err
	}
	k := keysFor(namespace, checkLock)
	return guardErr(b, ctx, func(ctx context.Context) error {
		if err := do1(ctx, b.tr, Command{Args: []any{"ping"}}).Err; err != nil {
			return fmt.Errorf("redisbackend: PING: %w", err)
		}
		if err := b.scripts.run(ctx, b.tr, checkScript, []string{k.lock}).Err; err != nil {
			return fmt.Errorf("redisbackend: running a Lua script: %w", err)
		}
		// Nobody waits for this lock: the message wakes no one.
		if err := do1(ctx, b.tr, Command{Args: []any{"publish", k.channel, "check"}}).Err; err != nil {
			return fmt.Errorf("redisbackend: PUBLISH on %s: %w", k.channel, err)
		}
		return nil
	})
}

// guardErr is guard for a call that returns only an error.
func guardErr(b *Backend, ctx context.Context, f func(context.Context) error) error {
	_, err := guard(b, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, f(ctx) })
	return err
}
