package redisbackend

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A watch on a channel that is already subscribed gives the subscriber no
// work: waking it anyway would cost every waiting call a goroutine switch,
// once per hand-off in a busy line. A watch on a channel that is not
// subscribed does give it work.
func TestWatchOnSubscribedChannelLeavesSubscriberAsleep(t *testing.T) {
	n := newNotifier(nil, time.Second)
	n.ps = goRedisPubSub{&redis.PubSub{}} // as after the first watch; no goroutines here
	live := n.channelLocked("live")
	live.subscribed, live.confirmed = true, true
	close(live.ready)

	w, err := n.register(context.Background(), "", "live", watcher{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.dirty) != 0 || len(n.kick) != 0 {
		t.Errorf("a watch on a subscribed channel queued %v for the subscriber (kicked: %v)", n.dirty, len(n.kick) > 0)
	}
	w.Stop()
	if _, ok := n.dirty["live"]; !ok || len(n.kick) != 1 {
		t.Errorf("the last watch of a channel stopped: queued %v (kicked: %v), want it to be unsubscribed", n.dirty, len(n.kick) > 0)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // not subscribed: register would wait for the SUBSCRIBE
	if _, err := n.register(ctx, "", "new", watcher{}); err == nil {
		t.Fatal("a watch with a cancelled context waited for no subscription")
	}
	if _, ok := n.dirty["new"]; !ok {
		t.Errorf("a watch on a channel not subscribed queued %v, want it subscribed", n.dirty)
	}
}

// "released:ID" names the process whose turn it is (lua/turns.lua): that
// process's plain waiters are woken at once, another's only after its
// turnGrace (unless another message comes first), and fair and change
// watchers at once, as by any release.
func TestTurnMessagesWakeTheProcessNamed(t *testing.T) {
	n := newNotifier(nil, time.Second)
	n.ps = goRedisPubSub{&redis.PubSub{}} // as after the first watch; no goroutines here
	n.turnGrace = time.Hour
	ch := n.channelLocked("k")
	ch.subscribed, ch.confirmed = true, true
	close(ch.ready)
	ctx := context.Background()
	plain, err := n.register(ctx, "", "k", watcher{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop()
	fair, err := n.register(ctx, "", "k", watcher{token: "tok"}) // waits out the ready timeout for its grant channel
	if err != nil {
		t.Fatal(err)
	}
	defer fair.Stop()
	changes, err := n.register(ctx, "", "k", watcher{changes: true})
	if err != nil {
		t.Fatal(err)
	}
	defer changes.Stop()
	drainAll := func() {
		for _, c := range []<-chan struct{}{plain.C, fair.C, changes.C} {
			select {
			case <-c:
			default:
			}
		}
	}
	got := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}

	n.wake("k", "released:someone-else")
	if got(plain.C) {
		t.Error("another process's turn woke this process's plain waiter at once")
	}
	if !got(fair.C) || !got(changes.C) {
		t.Error("another process's turn did not wake the fair and change watchers")
	}
	n.wake("k", "released:"+n.id)
	if !got(plain.C) {
		t.Error("this process's turn did not wake its plain waiter")
	}
	drainAll()
	n.wake("k", "released")
	if !got(plain.C) {
		t.Error("a plain release message did not wake the plain waiter")
	}
	drainAll()

	// Once the grace has passed with no other message, the plain waiter
	// tries anyway (the process woken may have crashed).
	n.mu.Lock()
	n.turnGrace = time.Millisecond
	n.mu.Unlock()
	n.wake("k", "released:someone-else")
	select {
	case <-plain.C:
	case <-time.After(time.Minute):
		t.Fatal("the plain waiter was not woken after another process's turn and the grace")
	}
}
