package redisbackend

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/driver"
)

var (
	errNotificationsOff = fmt.Errorf("redisbackend: release notifications are off (WithoutReleaseNotifications): %w", driver.ErrUnsupported)
	errClosed           = errors.New("redisbackend: backend closed")
)

// notifier delivers release messages to waiters over one pub/sub connection.
// Messages are hints: a waiter always keeps a fallback timer, and after a
// connection error every waiter is woken to try again, because a release
// may have been missed while go-redis reconnected.
//
// Waiters only change the wanted state under mu; one goroutine, the
// subscriber, sends SUBSCRIBE and UNSUBSCRIBE to match it. So no waiter
// waits on the network (a partition cannot hold one past its context), and
// the commands for one channel go out in the order of the state changes.
type notifier struct {
	tr           Transport
	readyTimeout time.Duration

	mu       sync.Mutex
	ps       PubSub // made by the first watch, with the goroutines
	channels map[string]*channel
	dirty    map[string]struct{}            // channels whose subscription may not match their watchers
	grants   map[chan struct{}]driver.Grant // grants announced to fair waiters, not yet taken
	closed   bool

	// id names this notifier's own channels, one per namespace
	// (grantChannel), on which releases tell its fair waiters of their
	// grants (grant_next), so that a grant wakes the one process whose
	// waiter it names instead of every process waiting for the key. Each
	// is subscribed from the namespace's first fair waiter on until the
	// notifier closes (ownChannels). grantees are the fair waiters, by
	// token.
	id          string
	idArg       any // id boxed once, as a script argument
	ownChannels map[string]bool
	grantees    map[string]chan struct{}

	// waiters counts the plain watchers (waiters that take any release,
	// not fair or change watchers) of every channel, so that an acquire
	// learns whether its process waits for the key (waitingProcess)
	// without taking mu while none does.
	waiters atomic.Int64

	// leaveLine takes this process out of the line for the lock of a
	// channel, in the background (leaveLineScript): none of its waiters
	// waits any more, and a turn would hold the others up for turnGrace.
	// Set by the Backend; nil: the others wait out the grace.
	leaveLine func(channel string)

	// turnGrace is how long the plain waiters of this process wait, after
	// a release woke another process for its turn, before they try anyway
	// (otherTurnGrace; tests shorten or lengthen it).
	turnGrace time.Duration

	// inflight are the channels of the SUBSCRIBEs the subscriber sent and
	// the server has not answered yet, oldest first. The server answers
	// commands in order, so a refusal (whose reply names no channel) is
	// the answer to the first of them: it fails the watches of that
	// channel only, not those of a channel subscribed after it. Emptied
	// when the connection breaks (its commands died with it).
	inflight []string

	kick chan struct{} // buffered: the subscriber has work
	quit chan struct{}
	loop sync.WaitGroup // the receiver and the subscriber
}

// refusal is a refusal of a channel's SUBSCRIBE, to come or come
// (notifier.refuse): a watch waiting for the channel's subscription fails
// with err once done is closed.
type refusal struct {
	done chan struct{} // closed once err is set
	err  error         // matches driver.ErrMisconfigured
}

// otherTurnGrace is how long the plain waiters of a process wait, after a
// release woke another process for its turn ("released:ID", lua/turns.lua),
// before they try anyway: the process woken takes the lock in well under a
// millisecond on a LAN, and its own release wakes the next; if it crashed
// or was paused, the others go on after this. Each such message moves the
// deadline, so in a busy line they do not try at all.
const otherTurnGrace = 10 * time.Millisecond

// acquiredMessage is published by an acquisition with
// Request.Notify (notifyAcquired): it wakes change watchers only.
const acquiredMessage = "acquired"

// channel is the state of one release channel.
type channel struct {
	watchers   map[chan struct{}]watcher // by wake-up channel
	waiters    int                       // plain watchers among them (watcher.plain)
	inLine     bool                      // a script was sent this process's id since it last left the line (waitingProcess)
	leave      *time.Timer               // takes the process out of line leaveLineDelay after its last plain watcher stopped; nil until then
	later      *time.Timer               // wakes the plain watchers otherTurnGrace after another process's turn; nil until then
	subscribed bool                      // SUBSCRIBE sent (and no UNSUBSCRIBE since)
	pending    int                       // SUBSCRIBEs sent whose confirmation has not come back
	ready      chan struct{}             // closed once the latest SUBSCRIBE is confirmed
	confirmed  bool
	refusal    *refusal // the next refusal of this channel's SUBSCRIBE
}

// watcher says which messages of its channel wake a watch.
type watcher struct {
	token   string // a fair waiter's token (watchFor), or "" for any release
	changes bool   // acquisitions wake it too (WatchRequest.Changes)
}

// plain reports whether w is a plain waiter's: one that takes the lock
// after any release, and whose process waits in turn (lua/turns.lua).
func (w watcher) plain() bool { return w.token == "" && !w.changes }

// waitingProcess returns the notifier's id when one of its plain watchers
// watches the channel name (a waiter of this process waits for the lock),
// and "" otherwise, or on a nil notifier. The caller sends the id with a
// script that may put the process in line, so the channel is marked as
// possibly in line (leaveIfIdle takes it out once nobody here waits).
func (n *notifier) waitingProcess(name string) string {
	if n == nil || n.waiters.Load() == 0 {
		return ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch := n.channels[name]; ch != nil && ch.waiters > 0 {
		ch.inLine = true
		return n.id
	}
	return ""
}

func newNotifier(tr Transport, readyTimeout time.Duration) *notifier {
	id := rand.Text()
	return &notifier{
		tr:           tr,
		readyTimeout: readyTimeout,
		channels:     map[string]*channel{},
		dirty:        map[string]struct{}{},
		grants:       map[chan struct{}]driver.Grant{},
		id:           id,
		idArg:        id,
		turnGrace:    otherTurnGrace,
		ownChannels:  map[string]bool{},
		grantees:     map[string]chan struct{}{},
		kick:         make(chan struct{}, 1),
		quit:         make(chan struct{}),
	}
}

// watch registers a waiter on name and returns once the subscription is
// confirmed, ctx ends, or the ready timeout passes (the waiter then relies
// on its timer until messages flow). A change watcher (changes) is woken by
// every message of the channel, "acquired" too. It fails with an error
// matching driver.ErrMisconfigured when the server refuses a SUBSCRIBE
// meanwhile (the client's credentials, or its user's permission for the
// channel): the reply does not say which channel it refused, but an ACL
// that refuses one of a namespace's channels refuses them all.
func (n *notifier) watch(ctx context.Context, name string, changes bool) (*driver.Watch, error) {
	return n.register(ctx, "", name, watcher{changes: changes})
}

// watchFor is watch for a fair waiter with token: it is woken by messages
// that name it ("next:TOKEN", "grant:TOKEN:FENCE:SEQ", whose grant the
// Watch's TakeGrant returns) and by plain "released" ones (the line was
// empty: its place may have lapsed), not by those that name another waiter.
// Plain waiters (token "") are woken by every message but those. Its
// grants come on the notifier's own channel of namespace (grantChannel),
// which the watch also waits for.
func (n *notifier) watchFor(ctx context.Context, namespace, name, token string) (*driver.Watch, error) {
	return n.register(ctx, namespace, name, watcher{token: token})
}

// grantChannel is the notifier's own channel for its fair waiters of
// namespace: NS:grants:ID, or grants:ID without a namespace. It shares the
// namespace's prefix with the lock keys, so that an ACL that lets a user
// at a namespace's keys and channels (~NS:* &NS:*) covers it, and has no
// brace, so that it never matches a lock's channel (NS:{KEY}:released).
func (n *notifier) grantChannel(namespace string) string {
	if namespace == "" {
		return "grants:" + n.id
	}
	return namespace + ":grants:" + n.id
}

// register adds the watch wr on name (for a fair waiter: of namespace):
// watch and watchFor.
func (n *notifier) register(ctx context.Context, namespace, name string, wr watcher) (*driver.Watch, error) {
	wake := make(chan struct{}, 1)
	token := wr.token

	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errClosed
	}
	if n.ps == nil {
		ps, err := n.tr.Subscribe(context.WithoutCancel(ctx)) // go-redis: no I/O until the first SUBSCRIBE
		if err != nil {
			n.mu.Unlock()
			return nil, fmt.Errorf("redisbackend: opening a pub/sub connection: %w", err)
		}
		n.ps = ps
		n.loop.Add(2)
		go n.receive(n.ps)
		go n.subscriber(n.ps)
	}
	ch := n.channelLocked(name)
	refused, grantsRefused := ch.refusal, (*refusal)(nil)
	ch.watchers[wake] = wr
	if wr.plain() {
		ch.waiters++
		n.waiters.Add(1)
		if ch.leave != nil {
			ch.leave.Stop()
		}
	}
	ready := ch.ready
	if !ch.subscribed {
		// Only then does the subscriber have work: waking it for a
		// channel already subscribed would cost every waiting call a
		// goroutine switch (a busy line registers a watch per hand-off).
		n.markDirty(name)
	}
	grantsReady := closedChan
	if token != "" {
		n.grantees[token] = wake
		grants := n.ownChannelLocked(n.grantChannel(namespace))
		if !grants.subscribed {
			n.markDirty(n.grantChannel(namespace)) // its SUBSCRIBE was refused: try again
		}
		grantsReady = grants.ready
		grantsRefused = grants.refusal
	}
	n.mu.Unlock()

	w := driver.NewWatch(wake, func() { n.unwatch(name, token, wake) })
	if token != "" {
		w = driver.NewGrantWatch(wake, func() { n.unwatch(name, token, wake) }, func() (driver.Grant, bool) {
			return n.takeGrant(wake)
		})
	}
	timer := time.NewTimer(n.readyTimeout)
	defer timer.Stop()
	waits := [...]struct {
		ready   chan struct{}
		refused *refusal
	}{{ready, refused}, {grantsReady, grantsRefused}}
	for _, wait := range waits {
		refusedDone := neverDone
		if wait.refused != nil {
			refusedDone = wait.refused.done
		}
		select {
		case <-wait.ready:
		case <-refusedDone:
			w.Stop()
			return nil, fmt.Errorf("redisbackend: subscribing to %s: %w", name, wait.refused.err)
		case <-timer.C:
			return w, nil
		case <-ctx.Done():
			w.Stop()
			return nil, ctx.Err()
		}
	}
	return w, nil
}

// neverDone is a channel that is never closed: no refusal to wait for.
var neverDone = make(chan struct{})

// closedChan is a closed channel: a subscription that needs no waiting.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// channelLocked returns the state of the channel name, made if need be.
// n.mu must be held.
func (n *notifier) channelLocked(name string) *channel {
	ch := n.channels[name]
	if ch == nil {
		ch = &channel{watchers: map[chan struct{}]watcher{}, ready: make(chan struct{}), refusal: newRefusal()}
		n.channels[name] = ch
	}
	return ch
}

// ownChannelLocked returns the state of the notifier's own channel name
// (grantChannel), and subscribes it the first time: a watcher that nobody
// reads keeps it subscribed until the notifier closes, so that fair
// waiters after the first never wait for its SUBSCRIBE. n.mu must be held.
func (n *notifier) ownChannelLocked(name string) *channel {
	ch := n.channelLocked(name)
	if !n.ownChannels[name] {
		n.ownChannels[name] = true
		ch.watchers[make(chan struct{}, 1)] = watcher{}
		n.markDirty(name)
	}
	return ch
}

// unwatch removes a waiter (with token, for a fair one). A channel left
// without waiters is unsubscribed at once, which keeps Redis's subscriber
// order (the order in which it delivers a release message) close to the
// order in which processes began waiting: across processes the longest
// waiter tends to try first.
func (n *notifier) unwatch(name, token string, wake chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.grants, wake)
	if token != "" && n.grantees[token] == wake {
		delete(n.grantees, token)
	}
	if ch := n.channels[name]; ch != nil {
		if wr, ok := ch.watchers[wake]; ok && wr.plain() {
			ch.waiters--
			n.waiters.Add(-1)
			if ch.waiters == 0 && ch.inLine && n.leaveLine != nil {
				// The process may be in line (an attempt named it), and
				// nobody here waits for now: leave the line unless a
				// waiter comes back soon (the next of the Client's line
				// watches as soon as it is first).
				if ch.leave == nil {
					ch.leave = time.AfterFunc(leaveLineDelay, func() { n.leaveIfIdle(name) })
				} else {
					ch.leave.Reset(leaveLineDelay)
				}
			}
		}
		delete(ch.watchers, wake)
		if ch.waiters == 0 && ch.later != nil {
			ch.later.Stop()
		}
		if len(ch.watchers) == 0 {
			n.markDirty(name)
		}
	}
}

// markDirty queues name for the subscriber. n.mu must be held.
func (n *notifier) markDirty(name string) {
	n.dirty[name] = struct{}{}
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// subscriber sends SUBSCRIBE and UNSUBSCRIBE until the notifier closes, so
// that a channel is subscribed exactly while it has waiters.
func (n *notifier) subscriber(ps PubSub) {
	defer n.loop.Done()
	for {
		select {
		case <-n.quit:
			return
		case <-n.kick:
		}
		for {
			name, subscribe, ok := n.nextChange()
			if !ok {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			var err error
			if subscribe {
				err = ps.Subscribe(ctx, name)
			} else {
				err = ps.Unsubscribe(ctx, name)
			}
			cancel()
			if subscribe && err != nil {
				n.dropInflight(name) // not sent, or not answered on this connection
			}
			if refused(err) {
				// go-redis could not log the connection in: trying again
				// cannot help. The next watch tries.
				n.refuse("", err)
				continue
			}
			n.changed(name, subscribe, err)
			if err != nil {
				select { // the connection is down: go-redis will reconnect
				case <-n.quit:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}
}

// nextChange picks a channel whose subscription does not match its
// watchers, and says whether to subscribe or unsubscribe it.
func (n *notifier) nextChange() (name string, subscribe, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for name := range n.dirty {
		delete(n.dirty, name)
		ch := n.channels[name]
		if ch == nil {
			continue
		}
		switch want := len(ch.watchers) > 0; {
		case want && !ch.subscribed:
			ch.subscribed = true
			ch.pending++
			n.inflight = append(n.inflight, name)
			return name, true, true
		case !want && ch.subscribed:
			ch.subscribed = false
			if ch.confirmed { // a later watcher waits for the next SUBSCRIBE
				ch.confirmed, ch.ready = false, make(chan struct{})
			}
			return name, false, true
		case !want && ch.pending == 0:
			delete(n.channels, name)
		}
	}
	return "", false, false
}

// changed records the outcome of a SUBSCRIBE or UNSUBSCRIBE.
func (n *notifier) changed(name string, subscribe bool, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch := n.channels[name]
	if ch == nil {
		return
	}
	if err != nil {
		// Not sent (or not known to be): try again later. A failed
		// UNSUBSCRIBE leaves the channel subscribed, harmlessly.
		if subscribe {
			ch.subscribed = false
			ch.pending = max(ch.pending-1, 0)
		}
		n.markDirty(name)
		return
	}
	if !subscribe && len(ch.watchers) == 0 && ch.pending == 0 {
		delete(n.channels, name)
	}
}

// receive dispatches messages until the pub/sub connection is closed.
func (n *notifier) receive(ps PubSub) {
	defer n.loop.Done()
	backoff := 10 * time.Millisecond
	for {
		msg, err := ps.Receive(context.Background())
		if refused(err) {
			// A SUBSCRIBE refused; the connection is fine.
			n.refuse(n.takeInflight(), err)
			continue
		}
		if err != nil {
			if n.isClosed() {
				return
			}
			n.clearInflight()
			// The PubSub reconnects and subscribes again on the next Receive.
			n.wakeAll()
			time.Sleep(backoff)
			backoff = min(backoff*2, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		switch msg.Kind {
		case "subscribe":
			n.confirm(msg.Channel)
		case "message":
			n.wake(msg.Channel, msg.Payload)
		}
	}
}

// refuse handles the refusal of a SUBSCRIBE (refused) of the channel name:
// the watches waiting for its subscription fail with it (register), and
// it is taken as not subscribed, and left so: retrying cannot help until
// the configuration changes, and the next watch of the channel tries
// again. Without a name (the connection's login was refused, or the
// refused command is not known), every channel whose subscription is not
// confirmed is refused.
func (n *notifier) refuse(name string, err error) {
	err = misconfigured(err)
	n.mu.Lock()
	defer n.mu.Unlock()
	refuseChannel := func(ch *channel) {
		ch.subscribed, ch.pending = false, 0
		r := ch.refusal
		ch.refusal = newRefusal()
		r.err = err
		close(r.done)
	}
	if name != "" {
		if ch := n.channels[name]; ch != nil && !ch.confirmed {
			refuseChannel(ch)
		}
		return
	}
	for _, ch := range n.channels {
		if ch.subscribed && !ch.confirmed {
			refuseChannel(ch)
		}
	}
}

// newRefusal returns a refusal still to come.
func newRefusal() *refusal { return &refusal{done: make(chan struct{})} }

// takeInflight returns the channel of the oldest SUBSCRIBE not answered
// yet, and forgets it; "" when none is known.
func (n *notifier) takeInflight() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.inflight) == 0 {
		return ""
	}
	name := n.inflight[0]
	n.inflight = n.inflight[1:]
	return name
}

// dropInflight forgets the latest SUBSCRIBE of name, which the subscriber
// could not send.
func (n *notifier) dropInflight(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := len(n.inflight) - 1; i >= 0; i-- {
		if n.inflight[i] == name {
			n.inflight = append(n.inflight[:i], n.inflight[i+1:]...)
			return
		}
	}
}

// clearInflight forgets every SUBSCRIBE not answered: the connection broke,
// and go-redis subscribes every channel again on the next one.
func (n *notifier) clearInflight() {
	n.mu.Lock()
	n.inflight = nil
	n.mu.Unlock()
}

// confirm handles the server's confirmation of a SUBSCRIBE. Confirmations
// come back in the order the commands went out, so the latest SUBSCRIBE of a
// channel is confirmed when none is pending any more (an older one, sent
// before an UNSUBSCRIBE, does not count for the new subscription).
func (n *notifier) confirm(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.inflight) > 0 && n.inflight[0] == name {
		n.inflight = n.inflight[1:] // else a SUBSCRIBE go-redis sent again after a reconnect
	}
	ch := n.channels[name]
	if ch == nil {
		return
	}
	ch.pending = max(ch.pending-1, 0) // go-redis re-subscribes after a reconnect, uncounted
	if ch.pending == 0 && ch.subscribed && !ch.confirmed {
		ch.confirmed = true
		close(ch.ready)
	}
	if ch.pending == 0 && !ch.subscribed && len(ch.watchers) == 0 {
		delete(n.channels, name)
	}
}

// wake delivers a message: "next:TOKEN" and "grant:TOKEN:FENCE:SEQ" to the
// fair waiter with that token only (a wake-up for no other waiter: the lock
// is that waiter's), "acquired" to no waiter, "released:ID" (another
// process's turn, lua/turns.lua) to the plain waiters otherTurnGrace later
// unless another message comes first and to the fair ones at once, and
// anything else ("released", or this process's turn) to every waiter.
// Change watchers get every message. On the notifier's own channels
// (grantChannel) only grants come, each to the fair waiter it names,
// whatever its key.
func (n *notifier) wake(name, payload string) {
	next, addressed := strings.CutPrefix(payload, "next:")
	grant, granted := parseGrant(payload)
	if granted {
		next, addressed = grant.token, true
	}
	acquired := payload == acquiredMessage
	turn, named := strings.CutPrefix(payload, "released:")
	othersTurn := named && turn != n.id
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ownChannels[name] {
		// Grants to this process's fair waiters, whatever their key.
		if w := n.grantees[next]; granted && w != nil {
			n.grants[w] = grant.Grant
			notify(w)
		}
		return
	}
	ch := n.channels[name]
	if named && !othersTurn && (ch == nil || ch.waiters == 0) && n.leaveLine != nil {
		// Our turn, and nobody here waits any more (a change watcher
		// keeps the channel): let the others go now rather than after
		// their grace.
		n.leaveLine(name)
	}
	if ch == nil {
		return
	}
	if ch.later != nil && !acquired {
		ch.later.Stop() // this message wakes them, or moves the deadline
	}
	if othersTurn && ch.waiters > 0 {
		n.wakeLaterLocked(name, ch)
	}
	for w, wr := range ch.watchers {
		switch {
		case wr.changes:
			notify(w)
		case acquired, othersTurn && wr.plain():
		case !addressed || wr.token == next:
			if granted {
				n.grants[w] = grant.Grant
			}
			notify(w)
		}
	}
}

// leaveLineDelay is how long a process whose waiters all stopped waiting
// for a lock (they took it, or gave up) stays in line for it: a Client's
// next waiter watches as soon as the one before it is done, so only a
// process that no longer waits leaves.
const leaveLineDelay = 100 * time.Millisecond

// leaveIfIdle takes the process out of the line for the lock of channel
// name if none of its waiters waits for it now (leaveLineDelay).
func (n *notifier) leaveIfIdle(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch := n.channels[name]
	if n.closed || (ch != nil && (ch.waiters > 0 || !ch.inLine)) {
		return
	}
	if ch != nil {
		ch.inLine = false
	}
	n.leaveLine(name)
}

// wakeLaterLocked wakes the plain watchers of channel name otherTurnGrace
// from now, unless a message comes first. n.mu must be held.
func (n *notifier) wakeLaterLocked(name string, ch *channel) {
	if ch.later == nil {
		ch.later = time.AfterFunc(n.turnGrace, func() { n.wakePlain(name) })
		return
	}
	ch.later.Reset(n.turnGrace)
}

// wakePlain wakes the plain watchers of channel name (wakeLaterLocked).
func (n *notifier) wakePlain(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch := n.channels[name]; ch != nil {
		for w, wr := range ch.watchers {
			if wr.plain() {
				notify(w)
			}
		}
	}
}

// takeGrant returns and forgets the grant announced to the waiter on wake.
func (n *notifier) takeGrant(wake chan struct{}) (driver.Grant, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	g, ok := n.grants[wake]
	delete(n.grants, wake)
	return g, ok
}

// grantMessage is a parsed "grant:TOKEN:FENCE:SEQ" message.
type grantMessage struct {
	driver.Grant
	token string
}

// parseGrant parses a grant message (grant_next in lua/grant.lua); ok is false
// for any other payload or a malformed one.
func parseGrant(payload string) (m grantMessage, ok bool) {
	rest, ok := strings.CutPrefix(payload, "grant:")
	if !ok {
		return m, false
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return m, false
	}
	seq, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil {
		return m, false
	}
	rest = rest[:i]
	j := strings.LastIndexByte(rest, ':')
	if j < 0 {
		return m, false
	}
	fence, err := strconv.ParseInt(rest[j+1:], 10, 64)
	if err != nil || fence <= 0 {
		return m, false
	}
	return grantMessage{Grant: driver.Grant{Fence: fence, Seq: seq}, token: rest[:j]}, true
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
	for _, ch := range n.channels {
		if ch.later != nil {
			ch.later.Stop()
		}
		if ch.leave != nil {
			ch.leave.Stop()
		}
	}
	n.mu.Unlock()
	close(n.quit)
	var err error
	if ps != nil {
		err = ps.Close()
	}
	n.loop.Wait()
	return err
}
