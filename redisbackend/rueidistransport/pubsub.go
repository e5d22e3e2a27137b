package rueidistransport

import (
	"context"
	"errors"
	"sync"

	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/rueidis"
)

// errClosed is Receive's error once the PubSub is closed.
var errClosed = errors.New("rueidistransport: pub/sub connection closed")

// Subscribe implements redisbackend.Transport with a dedicated connection
// (on Cluster, to any node: PUBLISH reaches every node's subscribers), made
// on the first Subscribe.
func (t *transport) Subscribe(context.Context) (redisbackend.PubSub, error) {
	return &pubSub{client: t.client, channels: map[string]bool{}, signal: make(chan struct{}, 1)}, nil
}

// pubSub is a redisbackend.PubSub on a dedicated rueidis connection, with
// rueidis's pub/sub hooks feeding a queue that Receive reads. When the
// connection breaks, Receive returns the error; the next Receive or
// Subscribe connects again and subscribes to every channel again.
type pubSub struct {
	client rueidis.Client

	mu       sync.Mutex // held while connecting, so one goroutine connects
	conn     rueidis.DedicatedClient
	gen      int             // counts connections, so a late report of an old one's loss is ignored
	channels map[string]bool // the channels subscribed, or to subscribe again on the next connection
	closed   bool

	qmu    sync.Mutex
	queue  []event
	signal chan struct{} // buffered: the queue has events
}

// event is a message for Receive, or an error.
type event struct {
	msg redisbackend.Message
	err error
}

// push queues e for Receive without blocking (rueidis's reader calls the
// hooks).
func (p *pubSub) push(e event) {
	p.qmu.Lock()
	p.queue = append(p.queue, e)
	p.qmu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// connectLocked makes the dedicated connection and subscribes it to every
// channel of p.channels. p.mu must be held.
func (p *pubSub) connectLocked(ctx context.Context) error {
	client := p.client
	if client.Mode() == rueidis.ClientModeCluster {
		for _, node := range client.Nodes() {
			client = node
			break
		}
	}
	conn, _ := client.Dedicate() // Close releases it
	wait := conn.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			p.push(event{msg: redisbackend.Message{Kind: "message", Channel: m.Channel, Payload: m.Message}})
		},
		OnSubscription: func(s rueidis.PubSubSubscription) {
			p.push(event{msg: redisbackend.Message{Kind: s.Kind, Channel: s.Channel}})
		},
	})
	p.gen++
	p.conn = conn
	gen := p.gen
	go func() {
		err := <-wait
		p.lost(gen, err)
	}()
	if len(p.channels) == 0 {
		return nil
	}
	names := make([]string, 0, len(p.channels))
	for name := range p.channels {
		names = append(names, name)
	}
	return p.sendLocked(ctx, conn, conn.B().Subscribe().Channel(names...).Build())
}

// sendLocked sends a SUBSCRIBE or UNSUBSCRIBE. A refusal by Redis (an
// error reply) goes to Receive, as go-redis delivers it; a failure of the
// connection is returned. p.mu must be held.
func (p *pubSub) sendLocked(ctx context.Context, conn rueidis.DedicatedClient, cmd rueidis.Completed) error {
	err := conn.Do(ctx, cmd).Error()
	if re, ok := rueidis.IsRedisErr(err); ok {
		p.push(event{err: redisbackend.ReplyError(re.Error())})
		return nil
	}
	if err != nil {
		p.dropLocked(p.gen)
		return convertErr(err)
	}
	return nil
}

// lost handles the end of connection gen: its error (nil when it was
// released) goes to Receive, and the next call connects again.
func (p *pubSub) lost(gen int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.gen || p.conn == nil {
		return
	}
	p.dropLocked(gen)
	if err == nil {
		err = errors.New("rueidistransport: pub/sub connection ended")
	}
	p.push(event{err: convertErr(err)})
}

// dropLocked releases connection gen if it is the current one. p.mu must
// be held.
func (p *pubSub) dropLocked(gen int) {
	if gen != p.gen || p.conn == nil {
		return
	}
	p.conn.Close() // not back to rueidis's pool, subscribed
	p.conn = nil
}

// ensureLocked connects if need be; it reports whether it did (its SUBSCRIBE
// covered every channel). p.mu must be held.
func (p *pubSub) ensureLocked(ctx context.Context) (connected bool, err error) {
	if p.closed {
		return false, errClosed
	}
	if p.conn != nil {
		return false, nil
	}
	return true, p.connectLocked(ctx)
}

// Subscribe implements redisbackend.PubSub.
func (p *pubSub) Subscribe(ctx context.Context, channel string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.channels[channel] = true
	connected, err := p.ensureLocked(ctx)
	if err != nil || connected {
		return err
	}
	return p.sendLocked(ctx, p.conn, p.conn.B().Subscribe().Channel(channel).Build())
}

// Unsubscribe implements redisbackend.PubSub.
func (p *pubSub) Unsubscribe(ctx context.Context, channel string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.channels, channel)
	if p.closed || p.conn == nil {
		return nil
	}
	return p.sendLocked(ctx, p.conn, p.conn.B().Unsubscribe().Channel(channel).Build())
}

// Receive implements redisbackend.PubSub. After a connection's loss it
// connects again, when there are channels to subscribe to.
func (p *pubSub) Receive(ctx context.Context) (redisbackend.Message, error) {
	for {
		p.qmu.Lock()
		if len(p.queue) > 0 {
			e := p.queue[0]
			p.queue = p.queue[1:]
			p.qmu.Unlock()
			return e.msg, e.err
		}
		p.qmu.Unlock()

		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return redisbackend.Message{}, errClosed
		}
		var err error
		if p.conn == nil && len(p.channels) > 0 {
			_, err = p.ensureLocked(ctx)
		}
		p.mu.Unlock()
		if err != nil {
			return redisbackend.Message{}, err
		}

		select {
		case <-p.signal:
		case <-ctx.Done():
			return redisbackend.Message{}, ctx.Err()
		}
	}
}

// Close implements redisbackend.PubSub.
func (p *pubSub) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		if p.conn != nil {
			p.conn.Close()
			p.conn = nil
		}
	}
	p.mu.Unlock()
	p.push(event{err: errClosed})
	return nil
}
