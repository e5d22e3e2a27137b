package redisbackend

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A watch on a channel that is already subscribed gives the subscriber no
// work: waking it anyway cost every waiting call a goroutine switch, once
// per hand-off in a busy line (issue 9). A watch on a channel that is not
// subscribed does give it work.
func TestWatchOnSubscribedChannelLeavesSubscriberAsleep(t *testing.T) {
	n := newNotifier(nil, time.Second)
	n.ps = &redis.PubSub{} // as after the first watch; no goroutines here
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
