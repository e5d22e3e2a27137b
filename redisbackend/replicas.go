package redisbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// replicaAck is the WithReplicaAck setting.
type replicaAck struct {
	replicas int
	timeout  time.Duration
}

// WithReplicaAck makes every acquire and renewal wait until at least
// replicas replicas have acknowledged it, for at most timeout, before it
// counts. Redis replicates asynchronously: without this, a master that fails
// right after an acquire can be replaced by a replica that never saw it, and
// another client then takes the lock while its holder still believes it
// holds it.
//
// The script and a WAIT go out together, in one pipeline on one connection
// (WAIT counts the acknowledgements of its own connection's writes; on
// Cluster, the connection to the master that owns the key). When fewer
// replicas acknowledge an acquire in time, the backend releases it again and
// the acquire fails with an error matching driver.ErrNotReplicated and
// fencelock.ErrNotAcquired; a waiting Acquire counts it as a failure and
// tries again (WithMaxFailures). When that release fails too, the hold may
// still be on the server: the error then says so and matches neither, and
// the Client releases the hold in the background as after a lost reply.
// A renewal that is not acknowledged counts as failed: the lease is not
// counted as extended, so the local deadline does not move, and the lock
// is lost at it unless a later renewal is acknowledged.
//
// What WAIT does not give: it is not consensus. An acknowledged write is in
// the memory of that many replicas, not on their disks; a failover after a
// second fault (the acknowledging replicas restarted, or Sentinel promoting a
// replica that had not acknowledged) can still lose the lock, and a client
// cut off with the old master keeps its lease until it ends. It narrows the
// window; the fencing token still decides what a resource accepts.
//
// Each acquire waits for the acknowledgement even when it finds the lock
// held, so keep timeout well under the ttls (a reply later than the lease's
// local deadline is not used), and expect it to be spent in full while
// replicas are down. replicas must be at least 1 and timeout positive;
// otherwise every call fails with an error matching
// driver.ErrInvalidArgument. Redis Ring is not supported.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(o *options) { o.ack = &replicaAck{replicas: replicas, timeout: timeout} }
}

// check reports an invalid setting.
func (a *replicaAck) check() error {
	switch {
	case a.replicas < 1:
		return &driver.InvalidArgumentError{Name: "WithReplicaAck replicas", Value: a.replicas, Reason: "must be at least 1"}
	case a.timeout < time.Millisecond:
		return &driver.InvalidArgumentError{Name: "WithReplicaAck timeout", Value: a.timeout, Reason: "must be at least 1ms"}
	}
	return nil
}

// waitCmd makes the WAIT of the setting.
func (a *replicaAck) waitCmd() *Command {
	return &Command{Args: []any{"wait", int64(a.replicas), ms(a.timeout)}}
}

// notReplicated is the error of a write too few replicas acknowledged.
func (a *replicaAck) notReplicated(acks int64) error {
	return fmt.Errorf("%w: %d of %d replicas acknowledged within %v", driver.ErrNotReplicated, acks, a.replicas, a.timeout)
}

// unreleased is the error of an acquisition too few replicas acknowledged
// whose undoing release failed (err): the hold may still be on the server.
// It matches neither driver.ErrNotReplicated, which says the store released
// the acquisition, nor driver.ErrNotSent, so the Client takes the acquire
// as one that may have been applied: it retries the token, or releases the
// hold in the background. err is kept in the text only, since a transport
// may have marked it ErrNotSent, which is the release's and not the
// acquire's.
func (a *replicaAck) unreleased(acks int64, err error) error {
	return fmt.Errorf("redisbackend: acquired, but %d of %d replicas acknowledged within %v, and releasing it again failed: %v", acks, a.replicas, a.timeout, err)
}

// runAcked runs s and then WAIT in one pipeline on the connection of keys[0]'s
// master (again with EVAL if the script was not cached), and returns the
// script's reply and the number of acknowledgements.
func (b *Backend) runAcked(ctx context.Context, s script, keys []string, args ...any) (Reply, int64, error) {
	replies, wait := b.scripts.runBatchOn(ctx, b.tr, keys[0], []call{{s: s, keys: keys, args: args}}, b.ack.waitCmd())
	r := replies[0]
	if r.Err != nil {
		return r, 0, r.Err
	}
	acks, err := wait.int64()
	return r, acks, err
}

// acquireAcked runs a lock's acquire script with replica acknowledgement.
// An acquisition too few replicas acknowledged is released again at once.
func (b *Backend) acquireAcked(ctx context.Context, s script, keys []string, k lockKeys, req driver.Request, args []any) (driver.Result, error) {
	cmd, acks, err := b.runAcked(ctx, s, keys, args...)
	if err != nil {
		return driver.Result{}, classify(err)
	}
	res, err := acquireReply(cmd)
	if err != nil {
		return driver.Result{}, classify(err)
	}
	if !res.Acquired || acks >= int64(b.ack.replicas) {
		return res, nil
	}
	// Held, but a failover now could lose it: undo it. A retry of the same
	// token later starts from scratch.
	if err := b.releaseUnreplicated(ctx, k, req.Token, acks); err != nil {
		return driver.Result{}, err
	}
	return driver.Result{}, b.ack.notReplicated(acks)
}

// releaseUnreplicated releases the hold of token on the lock k, which only
// acks replicas acknowledged (too few). It returns nil when the release
// went through, and the acquire's error otherwise (replicaAck.unreleased).
func (b *Backend) releaseUnreplicated(ctx context.Context, k lockKeys, token string, acks int64) error {
	if _, err := b.pipe.run(ctx, releaseScript, k.releaseKeys(token), token, k.channel, 0, ms(b.counterExpiry), "", "0", 0).int64(); err != nil {
		return b.ack.unreleased(acks, err)
	}
	return nil
}

// renewAcked renews a batch with replica acknowledgement: per master, one
// pipeline of renewals (each call with its kind's script) followed by a
// WAIT. Renewals of a master whose WAIT came short fail with
// ErrNotReplicated.
func (b *Backend) renewAcked(ctx context.Context, calls []call) []driver.RenewResult {
	results := make([]driver.RenewResult, len(calls))
	byConn := make(map[any][]int)
	var order []any
	for i, c := range calls {
		conn, err := b.masterOf(ctx, c.keys[0])
		if err != nil {
			results[i].Err = err
			continue
		}
		if _, ok := byConn[conn]; !ok {
			order = append(order, conn)
		}
		byConn[conn] = append(byConn[conn], i)
	}
	for _, conn := range order {
		idx := byConn[conn]
		batch := make([]call, len(idx))
		for j, i := range idx {
			batch[j] = calls[i]
		}
		replies, wait := b.scripts.runBatchOn(ctx, b.tr, batch[0].keys[0], batch, b.ack.waitCmd())
		acks, waitErr := wait.int64()
		for j, i := range idx {
			n, err := replies[j].int64()
			switch {
			case err != nil:
				results[i].Err = classify(err)
			case n == 1 && waitErr != nil:
				results[i].Err = classify(waitErr)
			case n == 1 && acks < int64(b.ack.replicas):
				results[i].Err = b.ack.notReplicated(acks)
			default:
				results[i].Held = n == 1
			}
		}
	}
	return results
}

// masterOf returns what tells apart the masters of keys: on go-redis, the
// client of key's master (connections that WAIT counts together); with
// another Transport, key itself (a WAIT per key).
func (b *Backend) masterOf(ctx context.Context, key string) (any, error) {
	if b.gr == nil {
		return key, nil
	}
	return b.gr.connFor(ctx, key)
}
