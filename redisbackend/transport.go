package redisbackend

import (
	"context"
	"fmt"
	"strconv"
)

// Transport carries the Backend's commands to Redis: the seam between the
// Backend (its scripts, keys, channels and replies) and a Redis client
// library. New wraps a go-redis client in one; NewTransport takes any other
// (the module redisbackend/rueidistransport has one for rueidis). Backends
// on different transports share locks: the scripts, keys and channels are
// the same.
//
// A Transport must honour its context: return when ctx ends, with an error
// that wraps ctx's. A command it still sends after that counts as possibly
// applied (the Client releases its token, and the release's tombstone
// refuses a late acquire). It must not resend a command after a network
// error (a script sent twice could take or extend a lock nobody holds any
// more); following a redirection (MOVED, ASK), whose reply means the
// command did not run, is fine. An error that matches driver.ErrNotSent
// tells the Backend that the command was certainly not written to any
// connection (no connection could be had, the client is closed, ctx had
// ended): it is then safe to retry, and nothing needs cleaning up.
type Transport interface {
	// Do runs cmds, in one round trip where it can (one per node on
	// Cluster, each command routed by its keys), and returns one Reply
	// per command, in order. Commands without keys go to any node.
	Do(ctx context.Context, cmds []Command) []Reply

	// DoOnMaster runs cmds in order on one connection to the master that
	// holds key (the connection WAIT counts the writes of), in one round
	// trip, and returns one Reply per command.
	DoOnMaster(ctx context.Context, key string, cmds []Command) []Reply

	// Subscribe opens a pub/sub connection, with no channel subscribed yet
	// (it may connect on the first Subscribe). The Backend makes one, for
	// its release notifications, and closes it when it closes.
	Subscribe(ctx context.Context) (PubSub, error)
}

// Command is one Redis command. Args holds its name and arguments, each a
// string or an int64 (an int in the number-of-keys argument of a script);
// Args[FirstKey:FirstKey+Keys] are its keys, by which Cluster routes it
// (Keys 0: it has none). The Backend's keys of one command share a hash
// tag, so they are on one node.
type Command struct {
	Args           []any
	FirstKey, Keys int

	sent *sendTracker // the call that sends it, for the go-redis transport; nil: none
}

// Reply is the reply to one Command: Err, or Value, which is nil (Redis's
// nil reply), an int64, a string, a float64, a bool, a []any of such
// values, or a map[string]any (a RESP3 map). Err is a ReplyError when Redis
// answered with an error.
type Reply struct {
	Value any
	Err   error
}

// ReplyError is an error reply from Redis, its text as Redis sent it, such
// as "NOSCRIPT No matching script" or "NOPERM ...". A Transport returns
// Redis's error replies as ReplyError values, so that the Backend can tell
// them from failures to reach the server.
type ReplyError string

// Error returns Redis's text.
func (e ReplyError) Error() string { return string(e) }

// RedisError marks ReplyError as a go-redis redis.Error, so that go-redis's
// helpers (redis.HasErrorPrefix, ...) read it as an error reply too.
func (ReplyError) RedisError() {}

// PubSub is a pub/sub connection of a Transport. After the connection
// breaks, Receive returns the error, and the PubSub connects again (on the
// next Receive or Subscribe) and subscribes again to every channel it was
// subscribed to, whose confirmations Receive then delivers as for any
// SUBSCRIBE.
type PubSub interface {
	// Subscribe sends SUBSCRIBE for channel. It need not wait for the
	// confirmation, which Receive delivers (a Message of Kind
	// "subscribe"), or Redis's refusal (an error of Receive's).
	Subscribe(ctx context.Context, channel string) error
	// Unsubscribe sends UNSUBSCRIBE for channel.
	Unsubscribe(ctx context.Context, channel string) error
	// Receive returns the next message or confirmation, or an error: a
	// ReplyError when Redis refused a SUBSCRIBE (the connection is
	// still fine), any other error when the connection broke or the
	// PubSub is closed.
	Receive(ctx context.Context) (Message, error)
	// Close closes the connection; a Receive waiting returns an error.
	Close() error
}

// Message is a message or a subscription event of a PubSub: Kind
// "message" with the Channel it came on and its Payload, or "subscribe" or
// "unsubscribe" with the Channel.
type Message struct {
	Kind, Channel, Payload string
}

// NewTransport returns a Backend whose commands go through t. The caller
// keeps ownership of t's client: closing the Backend does not close it.
// With a Transport other than go-redis's, renewals of many locks go in
// one pipelined round trip of a script call each (one script for the batch
// on a single go-redis client).
func NewTransport(t Transport, opts ...Option) *Backend {
	return newBackend(t, nil, opts)
}

// The reply decoders of the Backend: errors for values of another type.

func (r Reply) int64() (int64, error) {
	if r.Err != nil {
		return 0, r.Err
	}
	switch v := r.Value.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("redisbackend: unexpected reply %v (%T), want an integer", r.Value, r.Value)
}

func (r Reply) result() (any, error) { return r.Value, r.Err }

func (r Reply) slice() ([]any, error) {
	if r.Err != nil {
		return nil, r.Err
	}
	if v, ok := r.Value.([]any); ok {
		return v, nil
	}
	return nil, fmt.Errorf("redisbackend: unexpected reply %v (%T), want an array", r.Value, r.Value)
}

func (r Reply) int64Slice() ([]int64, error) {
	vals, err := r.slice()
	if err != nil {
		return nil, err
	}
	ints := make([]int64, len(vals))
	for i, v := range vals {
		n, err := Reply{Value: v}.int64()
		if err != nil {
			return nil, err
		}
		ints[i] = n
	}
	return ints, nil
}

// str returns a string reply, "" for nil.
func (r Reply) str() (string, error) {
	switch v := r.Value.(type) {
	case nil:
		return "", r.Err
	case string:
		return v, r.Err
	case int64:
		return strconv.FormatInt(v, 10), r.Err
	}
	return "", fmt.Errorf("redisbackend: unexpected reply %v (%T), want a string", r.Value, r.Value)
}

// pairs returns the field-value pairs of a reply to HGETALL, ZRANGE
// WITHSCORES or PUBSUB NUMSUB, whichever shape RESP2 or RESP3 gave them:
// a flat array, an array of pairs, or a map.
func (r Reply) pairs() ([][2]any, error) {
	if r.Err != nil {
		return nil, r.Err
	}
	var out [][2]any
	switch v := r.Value.(type) {
	case nil:
	case map[string]any:
		for k, e := range v {
			out = append(out, [2]any{k, e})
		}
	case map[any]any:
		for k, e := range v {
			out = append(out, [2]any{k, e})
		}
	case []any:
		for i := 0; i < len(v); i++ {
			if p, ok := v[i].([]any); ok && len(p) == 2 {
				out = append(out, [2]any{p[0], p[1]})
				continue
			}
			if i+1 < len(v) {
				out = append(out, [2]any{v[i], v[i+1]})
				i++
			}
		}
	default:
		return nil, fmt.Errorf("redisbackend: unexpected reply %v (%T), want pairs", r.Value, r.Value)
	}
	return out, nil
}

// strMap returns a reply to HGETALL as a map.
func (r Reply) strMap() (map[string]string, error) {
	pairs, err := r.pairs()
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, _ := Reply{Value: p[0]}.str()
		v, _ := Reply{Value: p[1]}.str()
		m[k] = v
	}
	return m, err
}

// number returns an integer or floating-point value (a score) as a float64.
func number(v any) float64 {
	switch v := v.(type) {
	case int64:
		return float64(v)
	case float64:
		return v
	case string:
		f, _ := strconv.ParseFloat(v, 64)
		return f
	}
	return 0
}
