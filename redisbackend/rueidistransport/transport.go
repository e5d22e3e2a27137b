// Package rueidistransport runs fencelock's Redis backend over rueidis
// (github.com/redis/rueidis): the same scripts, keys and channels as over
// go-redis, so Clients on either library share locks. Concurrent calls
// share rueidis's auto-pipelined connections.
//
//	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}})
//	...
//	locks := fencelock.New(rueidistransport.NewBackend(client))
//
// A single node, Sentinel (ClientOption.Sentinel) and Cluster all work;
// WithReplicaAck runs each script and its WAIT on one dedicated connection
// (rueidis's Dedicated). Release notifications use a dedicated pub/sub
// connection, which this package reconnects and resubscribes after a
// failure.
//
// rueidis returns at a call's deadline even when the server does not
// answer, but may still send a command whose call gave up while it was
// queued behind others; the backend treats such a call as possibly
// applied (it releases the token, and the release leaves a tombstone that
// refuses the late acquire). A call refused before it could be queued
// (the client is closed, no connection could be made, or its context had
// ended) matches driver.ErrNotSent.
package rueidistransport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/rueidis"
)

// New returns a redisbackend.Transport that sends the backend's commands
// through client. The caller keeps ownership of client.
func New(client rueidis.Client) redisbackend.Transport {
	return &transport{client: client}
}

// NewBackend returns a redisbackend.Backend on client, with opts: the
// redisbackend.New of rueidis.
func NewBackend(client rueidis.Client, opts ...redisbackend.Option) *redisbackend.Backend {
	return redisbackend.NewTransport(New(client), opts...)
}

// transport is a redisbackend.Transport on a rueidis.Client.
type transport struct {
	client rueidis.Client
}

// Do implements redisbackend.Transport: one command with Do, several with
// DoMulti (which rueidis splits by node on Cluster).
func (t *transport) Do(ctx context.Context, cmds []redisbackend.Command) []redisbackend.Reply {
	replies := make([]redisbackend.Reply, len(cmds))
	if err := ctx.Err(); err != nil {
		return fail(replies, fmt.Errorf("%w: %w", driver.ErrNotSent, err))
	}
	if len(cmds) == 1 {
		replies[0] = reply(t.client.Do(ctx, build(t.client.B(), cmds[0])))
		return replies
	}
	built := make([]rueidis.Completed, len(cmds))
	for i, c := range cmds {
		built[i] = build(t.client.B(), c)
	}
	for i, r := range t.client.DoMulti(ctx, built...) {
		replies[i] = reply(r)
	}
	return replies
}

// DoOnMaster implements redisbackend.Transport on a dedicated connection
// (rueidis's Dedicated), which on Cluster goes to the master of the first
// command's keys.
func (t *transport) DoOnMaster(ctx context.Context, _ string, cmds []redisbackend.Command) []redisbackend.Reply {
	replies := make([]redisbackend.Reply, len(cmds))
	if err := ctx.Err(); err != nil {
		return fail(replies, fmt.Errorf("%w: %w", driver.ErrNotSent, err))
	}
	_ = t.client.Dedicated(func(c rueidis.DedicatedClient) error {
		built := make([]rueidis.Completed, len(cmds))
		for i, cmd := range cmds {
			built[i] = build(c.B(), cmd)
		}
		for i, r := range c.DoMulti(ctx, built...) {
			replies[i] = reply(r)
		}
		return nil
	})
	return replies
}

// fail gives every reply err.
func fail(replies []redisbackend.Reply, err error) []redisbackend.Reply {
	for i := range replies {
		replies[i].Err = err
	}
	return replies
}

// build makes the rueidis command of c: its keys as keys, for routing.
func build(b rueidis.Builder, c redisbackend.Command) rueidis.Completed {
	if c.Keys == 0 {
		return b.Arbitrary(strs(c.Args)...).Build()
	}
	end := c.FirstKey + c.Keys
	return b.Arbitrary(strs(c.Args[:c.FirstKey])...).Keys(strs(c.Args[c.FirstKey:end])...).Args(strs(c.Args[end:])...).Build()
}

// strs formats command arguments as strings.
func strs(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = v
		case int64:
			out[i] = strconv.FormatInt(v, 10)
		case int:
			out[i] = strconv.Itoa(v)
		case []byte:
			out[i] = string(v)
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	return out
}

// reply converts a rueidis result: Redis's error replies to
// redisbackend.ReplyError, a nil reply to a nil Value.
func reply(r rueidis.RedisResult) redisbackend.Reply {
	if err := r.Error(); err != nil {
		if rueidis.IsRedisNil(err) {
			return redisbackend.Reply{}
		}
		return redisbackend.Reply{Err: convertErr(err)}
	}
	m, err := r.ToMessage()
	if err != nil {
		return redisbackend.Reply{Err: convertErr(err)}
	}
	v, err := m.ToAny()
	if err != nil {
		return redisbackend.Reply{Err: convertErr(err)}
	}
	return redisbackend.Reply{Value: replyErrors(v)}
}

// replyErrors replaces the error replies nested in v with
// redisbackend.ReplyError values.
func replyErrors(v any) any {
	switch v := v.(type) {
	case []any:
		for i, e := range v {
			v[i] = replyErrors(e)
		}
	case map[string]any:
		for k, e := range v {
			v[k] = replyErrors(e)
		}
	case error:
		return convertErr(v)
	}
	return v
}

// convertErr makes Redis's error replies redisbackend.ReplyError values
// (rueidis drops the "ERR " prefix that Redis puts on some, as go-redis
// does not; the backend reads the rest), and marks the errors of commands
// that were certainly not sent with driver.ErrNotSent.
func convertErr(err error) error {
	if re, ok := rueidis.IsRedisErr(err); ok {
		return redisbackend.ReplyError(re.Error())
	}
	var opErr *net.OpError
	if errors.Is(err, rueidis.ErrClosing) || (errors.As(err, &opErr) && opErr.Op == "dial") {
		return fmt.Errorf("%w: %w", driver.ErrNotSent, err)
	}
	return err
}
