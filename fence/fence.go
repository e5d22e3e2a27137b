// Package fence provides stores that reject stale fencing tokens: a write
// carries the fencing token of the lock under which it was made, and the
// store accepts it only if the token is at least as large as the largest it
// has accepted for that resource. The check and the write are one atomic
// step, so a holder that lost its lock (paused past its lease, cut off) and
// writes late, after a newer holder, is refused.
//
// Equal tokens are accepted: the same holder may write several times under
// one acquisition. Tokens must be positive.
//
// Table fences your own rows: a fence column on a business table (say
// products.fence), claimed with the lock's token inside your transaction
// before you write the row (Claim for database/sql; package fencepgx, a
// module of its own, claims through pgx). It
// needs no table of its own and no copy of the value: this is the usual
// way to fence a database write.
//
// RedisStore keeps values in Redis (one Lua script per write); SQLStore keeps
// them in a SQL table of its own (PostgreSQL or SQLite, through
// database/sql) and can write inside the caller's transaction, next to the
// business write.
//
// A store is only as safe as its own durability: it must remember the
// largest token it accepted. A Redis without persistence that restarts, or a
// failover that loses recent writes, forgets it, and the next write of any
// token is then accepted as a first write. Keep the fenced data and its
// token where the data itself is durable (the SQL store, next to the
// business rows), or run Redis with AOF and replica acknowledgement.
package fence

import (
	"context"
	"errors"
	"fmt"
)

// ErrStale is matched (errors.Is) by every *StaleError.
var ErrStale = errors.New("fence: stale fencing token")

// ErrNotFound is returned by Read for a resource never written, and
// matched by the error of Table.Claim for a row that does not exist.
var ErrNotFound = errors.New("fence: resource not found")

// StaleError reports a write refused because a newer token has been
// accepted for the resource.
type StaleError struct {
	Resource string
	Token    int64 // the refused token
	Current  int64 // the largest token the store has accepted
}

// Error names the resource and both tokens.
func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale fencing token %d for %q: the store has accepted %d", e.Token, e.Resource, e.Current)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Store is a fenced store of values by resource name.
type Store interface {
	// Write stores value for resource if token is at least the largest token
	// accepted for resource so far, and records token; otherwise it returns
	// a *StaleError and changes nothing. Check and write are atomic.
	Write(ctx context.Context, resource string, token int64, value []byte) error
	// Read returns the value of resource and the token it was written with,
	// or ErrNotFound.
	Read(ctx context.Context, resource string) (value []byte, token int64, err error)
}

// checkArgs validates a write's arguments.
func checkArgs(resource string, token int64) error {
	if resource == "" {
		return errors.New(`fence: invalid resource "": must not be empty`)
	}
	if token <= 0 {
		return fmt.Errorf("fence: invalid token %d: must be positive", token)
	}
	return nil
}
