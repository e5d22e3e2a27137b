package fencelock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Check reports, at start-up rather than at the first lock, a Client that
// cannot work: an invalid option (WithSafetyMargin, WithIdentity), a namespace the
// backend cannot use (the Redis backend refuses braces, which would break
// Cluster hash tags), or a backend that cannot be reached or cannot run
// what it needs (driver.Store.Check). Invalid options give an error matching
// ErrInvalidArgument, a store that cannot be reached one matching
// ErrUnavailable, and a store that refuses the client's credentials or
// its user's permissions (a wrong password, an ACL without the commands,
// keys or channels fencelock uses) one matching ErrMisconfigured. Call it
// once after New:
//
//	locks := fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace(ns))
//	if err := locks.Check(ctx); err != nil {
//		log.Fatal(err)
//	}
func (c *Client) Check(ctx context.Context) error {
	if c == nil {
		return errNilClient
	}
	if ctx == nil {
		return errNilContext
	}
	if c.cfg.marginErr != nil {
		return c.cfg.marginErr
	}
	if c.cfg.identityErr != nil {
		return c.cfg.identityErr
	}
	if c.closed() {
		return fmt.Errorf("fencelock: check: %w", ErrClosed)
	}
	if err := c.store.Check(ctx, c.cfg.namespace); err != nil {
		if errors.Is(err, ErrInvalidArgument) {
			return err
		}
		return c.unavailable(ctx, "check", "", 1, time.Now(), err)
	}
	return nil
}
