package redisbackend

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/redis/go-redis/v9"
)

var (
	errNotificationsOff = errors.New("redisbackend: release notifications are off")
	errClosed           = errors.New("redisbackend: backend closed")
)

// notifier delivers release messages to waiters over one pub/sub connection.
// Messages are hints: a waiter always keeps a fallback timer, and after a
// connection error every waiter is woken to try again, because a release
// may have been missed while go-redis reconnected.
type notifier struct {
	rdb          redis.UniversalClient
	readyTimeout time.Duration

	mu       sync.Mutex
	ps       *redis.PubSub // made by the first watch
	channels map[string]*channel
	closed   bool
	loop     sync.WaitGroup
}

// channel is the state of one subscribed channel.
type channel struct {
	watchers  map[chan struct{}]struct{}
	ready     chan struct{} // closed once the server confirmed the subscription
	confirmed bool
}

func newNotifier(rdb redis.UniversalClient, readyTimeout time.Duration) *notifier {
	return &notifier{rdb: rdb, readyTimeout: readyTimeout, channels: map[string]*channel{}}
}

// watch registers a waiter on name and returns once the subscription is
// confirmed, ctx ends, or the ready timeout passes (the waiter then relies
// on its timer until messages flow).
func (n *notifier) watch(ctx context.Context, name string) (*fencelock.Watch, error) {
	wake := make(chan struct{}, 1)

	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errClosed
	}
	if n.ps == nil {
		n.ps = n.rdb.Subscribe(context.WithoutCancel(ctx))
		n.loop.Add(1)
		go n.receive(n.ps)
	}
	ch := n.channels[name]
	if ch == nil {
		// Subscribing under the lock keeps SUBSCRIBE and UNSUBSCRIBE of one
		// channel in the order of our state changes.
		if err := n.ps.Subscribe(ctx, name); err != nil {
			n.mu.Unlock()
			return nil, err
		}
		ch = &channel{watchers: map[chan struct{}]struct{}{}, ready: make(chan struct{})}
		n.channels[name] = ch
	}
	ch.watchers[wake] = struct{}{}
	ready := ch.ready
	n.mu.Unlock()

	w := fencelock.NewWatch(wake, func() { n.unwatch(name, wake) })
	timer := time.NewTimer(n.readyTimeout)
	defer timer.Stop()
	select {
	case <-ready:
	case <-timer.C:
	case <-ctx.Done():
		w.Stop()
		return nil, ctx.Err()
	}
	return w, nil
}

// unwatch removes a waiter; a channel left without waiters is unsubscribed
// at once. That keeps Redis's subscriber order (the order in which it
// delivers a release message) close to the order in which processes began
// waiting, so across processes the longest waiter tends to try first.
func (n *notifier) unwatch(name string, wake chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch := n.channels[name]
	if ch == nil {
		return
	}
	delete(ch.watchers, wake)
	if len(ch.watchers) > 0 || n.closed {
		return
	}
	delete(n.channels, name)
	// Under the lock, so that a new watch's SUBSCRIBE comes after this.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = n.ps.Unsubscribe(ctx, name) // on error the channel stays subscribed, harmlessly
}

// receive dispatches messages until the pub/sub connection is closed.
func (n *notifier) receive(ps *redis.PubSub) {
	defer n.loop.Done()
	backoff := 10 * time.Millisecond
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			if n.isClosed() {
				return
			}
			// go-redis reconnects and subscribes again on the next Receive.
			n.wakeAll()
			time.Sleep(backoff)
			backoff = min(backoff*2, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				n.confirm(m.Channel)
			}
		case *redis.Message:
			n.wake(m.Channel)
		}
	}
}

func (n *notifier) confirm(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch := n.channels[name]; ch != nil && !ch.confirmed {
		ch.confirmed = true
		close(ch.ready)
	}
}

func (n *notifier) wake(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch := n.channels[name]; ch != nil {
		for w := range ch.watchers {
			notify(w)
		}
	}
}

func (n *notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ch := range n.channels {
		for w := range ch.watchers {
			notify(w)
		}
	}
}

// notify leaves one pending wake-up on w without blocking.
func notify(w chan struct{}) {
	select {
	case w <- struct{}{}:
	default:
	}
}

func (n *notifier) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// close closes the pub/sub connection and waits for the receive loop.
func (n *notifier) close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	ps := n.ps
	n.mu.Unlock()
	var err error
	if ps != nil {
		err = ps.Close()
	}
	n.loop.Wait()
	return err
}
