package redisbackend

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// goRedis is the Transport of New: a go-redis UniversalClient. It sends
// scripts and WAIT without go-redis's retries (noRetry), and reports to
// each script call's sendTracker when go-redis writes it, so that guard
// knows whether a call abandoned at its caller's deadline was sent.
type goRedis struct {
	rdb redis.UniversalClient
}

var _ Transport = (*goRedis)(nil)

// Do implements Transport: one command as itself, several in one pipeline.
func (g *goRedis) Do(ctx context.Context, cmds []Command) []Reply {
	replies := make([]Reply, len(cmds))
	if len(cmds) == 1 {
		replies[0] = g.do1(ctx, cmds[0])
		return replies
	}
	pipeline(ctx, g.rdb, cmds, replies)
	return replies
}

// do1 runs one command: Do without the slices.
func (g *goRedis) do1(ctx context.Context, c Command) Reply {
	cmd := c.redisCmd(ctx)
	_ = g.rdb.Process(ctx, c.cmder(cmd)) // the error is in cmd
	return replyOf(cmd)
}

// DoOnMaster implements Transport: one pipeline on the connection of the
// master that holds key (on Cluster, that master's own client).
func (g *goRedis) DoOnMaster(ctx context.Context, key string, cmds []Command) []Reply {
	replies := make([]Reply, len(cmds))
	conn, err := g.connFor(ctx, key)
	if err != nil {
		for i := range replies {
			replies[i].Err = err
		}
		return replies
	}
	pipeline(ctx, conn, cmds, replies)
	return replies
}

// connFor returns the client whose pipelines reach the master that holds
// key on one connection: on Cluster, that master's client; otherwise rdb.
func (g *goRedis) connFor(ctx context.Context, key string) (redis.UniversalClient, error) {
	if cc, ok := g.rdb.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, key)
	}
	return g.rdb, nil
}

// pipeline runs cmds in one pipeline of rdb and puts their replies in
// replies.
func pipeline(ctx context.Context, rdb redis.UniversalClient, cmds []Command, replies []Reply) {
	pipe := rdb.Pipeline()
	rcmds := make([]*redis.Cmd, len(cmds))
	for i, c := range cmds {
		rcmds[i] = c.redisCmd(ctx)
		_ = pipe.Process(ctx, c.cmder(rcmds[i]))
	}
	_, _ = pipe.Exec(ctx) // errors are in the commands
	for i, cmd := range rcmds {
		replies[i] = replyOf(cmd)
	}
}

// redisCmd makes the go-redis command of c.
func (c Command) redisCmd(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx, c.Args...)
	if c.Keys > 0 {
		cmd.SetFirstKeyPos(int8(c.FirstKey)) // for Cluster routing
	}
	return cmd
}

// cmder returns what go-redis processes for c's command cmd: a script
// call or a WAIT without go-redis's retries (noRetry); other commands
// (reads, PING, PUBLISH), which are harmless to send twice, as they are.
func (c Command) cmder(cmd *redis.Cmd) redis.Cmder {
	if name, _ := c.Args[0].(string); name == "evalsha" || name == "eval" || name == "wait" {
		return noRetry{Cmd: cmd, sent: c.sent}
	}
	return cmd
}

// replyOf returns the Reply of a go-redis command that has its reply.
// go-redis's errors stay as they are (its error replies are redis.Error
// values, as ReplyError is).
func replyOf(cmd *redis.Cmd) Reply {
	err := cmd.Err()
	if err == redis.Nil {
		return Reply{}
	}
	return Reply{Value: cmd.Val(), Err: err}
}

// Subscribe implements Transport with go-redis's PubSub, which connects
// on its first SUBSCRIBE and subscribes again after a reconnection.
func (g *goRedis) Subscribe(ctx context.Context) (PubSub, error) {
	return goRedisPubSub{g.rdb.Subscribe(ctx)}, nil
}

// goRedisPubSub is a go-redis PubSub as a PubSub.
type goRedisPubSub struct {
	ps *redis.PubSub
}

func (p goRedisPubSub) Subscribe(ctx context.Context, channel string) error {
	return p.ps.Subscribe(ctx, channel)
}

func (p goRedisPubSub) Unsubscribe(ctx context.Context, channel string) error {
	return p.ps.Unsubscribe(ctx, channel)
}

func (p goRedisPubSub) Receive(ctx context.Context) (Message, error) {
	msg, err := p.ps.Receive(ctx)
	if err != nil {
		return Message{}, err
	}
	switch m := msg.(type) {
	case *redis.Subscription:
		return Message{Kind: m.Kind, Channel: m.Channel}, nil
	case *redis.Message:
		return Message{Kind: "message", Channel: m.Channel, Payload: m.Payload}, nil
	}
	return Message{Kind: "pong"}, nil
}

func (p goRedisPubSub) Close() error { return p.ps.Close() }

// noRetry keeps go-redis from sending a lock script again after a network
// error (it retries by default, on a new connection). A copy sent after the
// caller gave up could take or extend a lock that nobody holds any more;
// the Client retries on its own terms instead. go-redis still follows
// MOVED, ASK and READONLY replies, which mean the script did not run.
//
// It also reports to its call's sendTracker when go-redis writes it.
type noRetry struct {
	*redis.Cmd
	sent *sendTracker // nil: not tracked
}

// NoRetry implements redis.Cmder.
func (noRetry) NoRetry() bool { return true }

// Args implements redis.Cmder. go-redis reads a command's arguments to write
// it to a connection, so a command whose Args was never read was never sent.
// Once its call has been abandoned unsent, it stays unsent: go-redis, still
// working on it in the background, gets a harmless ECHO to write instead.
func (c noRetry) Args() []any {
	if c.sent != nil && !c.sent.markWritten() {
		return []any{"echo", "fencelock: abandoned before it was sent"}
	}
	return c.Cmd.Args()
}
