// Package faultproxy is a fault-injection TCP proxy for tests. Put it between
// a client (such as go-redis) and a real server on loopback to reproduce
// network faults that are hard to get otherwise: slow replies, a frozen
// network, a reply lost after the server applied the request, connection
// resets, a server that refuses connections, and a partition that does not
// reset anything.
//
// Each client connection gets its own upstream connection. Bytes travel in
// chunks: a chunk is whatever one Read returned, from the upstream for a
// reply chunk, from the client for a request chunk. With RESP over loopback
// and a client that sends one command at a time, one reply is typically one
// chunk; a pipeline's replies, or a large reply, may come as fewer or more
// chunks. Faults that count (DropReplies) count chunks, not RESP replies.
//
// Every fault can be switched at any time, from any goroutine, while traffic
// flows, and applies to open and future connections alike. Each direction of
// a connection is a FIFO: chunks are delivered in the order they were read,
// whatever the faults do to their timing. Connection closes (an EOF, i.e. a
// FIN) are passed on in order behind the data, also during Blackhole, so
// that a client closing its connection still closes the upstream one.
//
// Things a test must know when the client is go-redis:
//
//   - go-redis keeps connections in a pool and checks an idle connection
//     before reusing it; one that was reset or closed is silently replaced
//     by a new one. So ResetAll is only seen by a command in flight at the
//     time (for example a BLPOP kept blocking); a reset of an idle pooled
//     connection merely makes the next command dial a new one.
//   - A new go-redis connection sends HELLO (and CLIENT SETINFO) before the
//     first command, so faults armed before the connection exists also hit
//     that handshake: DropNextReply would drop the HELLO reply. Run a PING
//     first to open the connection, then arm the fault. To force a new
//     connection, use a new client (or Close the old one), or call ResetAll
//     while the pool is idle.
//   - go-redis may report a reset as io.EOF rather than ECONNRESET: with
//     RESP3 it peeks at the socket for push notifications before reading a
//     reply, and that peek consumes the kernel's reset error. A raw
//     net.Conn's read does fail with ECONNRESET.
//   - Set MaxRetries: -1 so that go-redis does not retry over a fault, and
//     short Dial/Read/Write timeouts so that a Blackhole or Stall fails a
//     command quickly.
//
// It is the test harness of fencelock's own modules (the library, cmd,
// etcdbackend, fencelockprom), public so that each of them can use it; it
// is not part of the library's API, and no library package imports it.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

const (
	// dialTimeout bounds one dial of the target.
	dialTimeout = 5 * time.Second
	// readBufSize is the size of each reader's buffer, i.e. the largest
	// chunk.
	readBufSize = 32 << 10
	// acceptBackoff is how long the accept loop waits after an accept
	// error that is not the listener being closed (such as EMFILE).
	acceptBackoff = 10 * time.Millisecond
)

// direction is one of the two directions of a proxied connection.
type direction int

const (
	requests direction = iota // client → server
	replies                   // server → client
)

// kind says what a queued chunk is.
type kind int

const (
	data kind = iota // bytes to write
	eof              // the source sent FIN: pass it on with CloseWrite
	drop             // a dropped reply: reset the connection
)

// chunk is one item of a direction's FIFO.
type chunk struct {
	kind kind
	data []byte    // for data
	at   time.Time // when the proxy read it
}

// pipe is one direction of a link: the chunks read and not yet written.
type pipe struct {
	q    []chunk       // guarded by Proxy.mu
	wake chan struct{} // capacity 1: something changed, look again
}

// link is one client connection and its upstream connection.
type link struct {
	client   *net.TCPConn
	server   *net.TCPConn // nil until dialed; guarded by Proxy.mu
	pipes    [2]pipe
	done     chan struct{} // closed when the link is torn down
	closed   bool          // guarded by Proxy.mu
	finished int           // directions whose EOF was passed on; guarded by Proxy.mu
}

// Proxy is a fault-injection TCP proxy listening on 127.0.0.1. Its methods
// are safe for concurrent use. Create one with Start or New.
type Proxy struct {
	ln     net.Listener
	target string
	ctx    context.Context // cancelled by Close, ends dials in progress
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the Proxy started

	mu          sync.Mutex
	closed      bool
	links       map[*link]struct{}
	delay       [2]time.Duration
	stalls      [2]int // how many unresumed stalls hold each direction
	blackhole   bool
	refuse      bool
	dropReplies int // reply chunks still to drop
	accepted    int
	refused     int
	dropped     int
	buffered    int // bytes queued in all pipes
}

// Start starts a proxy listening on 127.0.0.1 on a free port that forwards
// each connection it accepts to target ("host:port") over a new upstream
// connection. No fault is on at first. Call Close when done; in a test, New
// does both.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listening: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		ln:     ln,
		target: target,
		ctx:    ctx,
		cancel: cancel,
		links:  make(map[*link]struct{}),
	}
	p.wg.Go(p.acceptLoop)
	return p, nil
}

// New is Start for tests: it starts a proxy to target, fails the test if
// that fails, and registers Close with t.Cleanup.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("faultproxy: closing: %v", err)
		}
	})
	return p
}

// Addr returns the address clients connect to, "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Close stops the proxy: it closes the listener and every connection (both
// sides, without reset), drops whatever was held by delays or stalls, and
// waits until every goroutine of the proxy has ended. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	links := p.linksLocked()
	p.mu.Unlock()
	var err error
	if !already {
		p.cancel()
		if err = p.ln.Close(); errors.Is(err, net.ErrClosed) {
			err = nil
		}
		for _, l := range links {
			p.closeLink(l, false)
		}
	}
	p.wg.Wait()
	return err
}

// DelayReplies delays every reply chunk: each is delivered to the client d
// after the proxy read it from the server (later if a stall holds it), in
// order. Chunks are not delayed by one another: a chunk read while an
// earlier one waits is delivered d after its own read. The delay in force
// when a chunk is due applies, so changing it also moves chunks already
// waiting; d <= 0 turns the delay off. Use it for a slow server or network,
// e.g. to make a command outlive a timeout while the server still applies it.
func (p *Proxy) DelayReplies(d time.Duration) { p.setDelay(replies, d) }

// DelayRequests is DelayReplies for the other direction: every request
// chunk reaches the server d after the proxy read it from the client. Use
// it to delay when the server applies a command.
func (p *Proxy) DelayRequests(d time.Duration) { p.setDelay(requests, d) }

func (p *Proxy) setDelay(dir direction, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay[dir] = max(d, 0)
	p.wakeAllLocked()
}

// Stall freezes both directions, like a frozen network or peer: the proxy
// keeps reading from both sides and holds every chunk (so senders do not
// block), and delivers nothing until resume is called. Then everything held
// is delivered in order (each chunk still no earlier than a delay in force
// allows). Connection closes are held too. Stalls nest: the direction moves
// again when every stall holding it has been resumed. Calling resume more
// than once has no further effect. Use it to reproduce a command that is
// neither applied nor answered for a while, then goes through. A client
// that gives up during the stall and closes its connection does not take
// its command back: on resume the server still gets the command, then the
// close.
func (p *Proxy) Stall() (resume func()) { return p.stall(requests, replies) }

// StallReplies is Stall for replies only: requests reach the server, which
// applies them, but no reply reaches the client until resume is called. Use
// it for "the server applied it, the client does not know yet".
func (p *Proxy) StallReplies() (resume func()) { return p.stall(replies) }

// StallRequests is Stall for requests only: nothing reaches the server until
// resume is called (replies to requests already delivered still flow). Use
// it for "the server has not seen it yet".
func (p *Proxy) StallRequests() (resume func()) { return p.stall(requests) }

func (p *Proxy) stall(dirs ...direction) func() {
	p.mu.Lock()
	for _, d := range dirs {
		p.stalls[d]++
	}
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, d := range dirs {
				p.stalls[d]--
			}
			p.wakeAllLocked()
		})
	}
}

// DropNextReply is DropReplies(1): the next reply chunk from the server is
// lost and its client connection reset.
func (p *Proxy) DropNextReply() { p.DropReplies(1) }

// DropReplies arms the proxy to drop the next n reply chunks read from the
// server, on any connection, replacing any count still armed (n <= 0
// disarms). A dropped chunk is discarded, the proxy stops reading that
// upstream connection, and when the chunk would have been delivered (right
// away, unless a delay or stall holds that direction, so earlier replies are
// still delivered first) the client connection is reset with RST and the
// upstream one closed. So the server applied the request, but the client
// never sees the reply: its read fails with ECONNRESET. Chunks read while
// Blackhole is on are not counted. See the package doc for what a chunk is
// and for go-redis's handshake on new connections.
func (p *Proxy) DropReplies(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropReplies = max(n, 0)
}

// ResetAll resets every open client connection now, with RST (SO_LINGER 0),
// and its upstream connection, discarding whatever a delay or stall held,
// and returns how many it reset. Later connections are not affected. Use it
// for a connection reset by the network or a restarted middlebox; see the
// package doc for why a pooled idle go-redis connection does not show it.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	links := p.linksLocked()
	p.mu.Unlock()
	for _, l := range links {
		p.closeLink(l, true)
	}
	return len(links)
}

// Refuse, while on, makes the proxy accept each new connection and reset it
// at once (RST) without connecting upstream, like a server that is down or
// restarting. Connections already open are not affected; call ResetAll too
// to break them.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = on
}

// Blackhole, while on, makes the proxy read and discard every chunk in both
// directions: requests never reach the server, replies never reach the
// client, and the connections stay open, like a network partition that does
// not reset anything. The decision is made when a chunk is read: chunks read
// while it is on are lost for good (turning it off does not bring them
// back), chunks read before are still delivered. Connection closes still
// pass. Clients see timeouts.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole = on
}

// Conns returns how many client connections are open through the proxy
// (including one whose upstream is still being dialed). Use it to wait until
// a client has connected or until connections are gone.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Accepted returns how many client connections the proxy has accepted,
// including those Refuse reset.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Refused returns how many client connections Refuse has reset.
func (p *Proxy) Refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// RepliesDropped returns how many reply chunks DropReplies has dropped. It
// counts a chunk when it is read and dropped, which is before its client
// connection is reset.
func (p *Proxy) RepliesDropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// Buffered returns how many bytes the proxy has read and holds, not yet
// delivered, in both directions of all connections (held by a delay or
// stall, or just in transit). Use it to wait until a command sent during a
// Stall has reached the proxy.
func (p *Proxy) Buffered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buffered
}

// linksLocked returns the open links. p.mu must be held.
func (p *Proxy) linksLocked() []*link {
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	return links
}

// wakeAllLocked makes every writer look at its queue and the faults again.
// p.mu must be held.
func (p *Proxy) wakeAllLocked() {
	for l := range p.links {
		l.pipes[requests].notify()
		l.pipes[replies].notify()
	}
}

func (pp *pipe) notify() {
	select {
	case pp.wake <- struct{}{}:
	default:
	}
}

// acceptLoop accepts client connections until the listener is closed.
func (p *Proxy) acceptLoop() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(acceptBackoff):
			}
			continue
		}
		client := c.(*net.TCPConn)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			return
		}
		p.accepted++
		if p.refuse {
			p.refused++
			p.mu.Unlock()
			reset(client)
			continue
		}
		l := &link{client: client, done: make(chan struct{})}
		for i := range l.pipes {
			l.pipes[i].wake = make(chan struct{}, 1)
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.serve(l) })
	}
}

// serve dials the upstream for l and runs its four pumps.
func (p *Proxy) serve(l *link) {
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		p.closeLink(l, true)
		return
	}
	server := c.(*net.TCPConn)
	p.mu.Lock()
	if l.closed {
		p.mu.Unlock()
		server.Close()
		return
	}
	l.server = server
	p.mu.Unlock()
	p.wg.Go(func() { p.read(l, requests, l.client) })
	p.wg.Go(func() { p.write(l, requests, server) })
	p.wg.Go(func() { p.read(l, replies, server) })
	p.write(l, replies, l.client)
}

// read reads chunks from src and queues them on l's dir pipe, applying
// Blackhole and DropReplies, until src ends.
func (p *Proxy) read(l *link, dir direction, src *net.TCPConn) {
	buf := make([]byte, readBufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.push(l, dir, buf[:n]) {
			return
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				p.pushEOF(l, dir)
			} else {
				p.closeLink(l, true)
			}
			return
		}
	}
}

// push queues a copy of b on l's dir pipe, or discards it. It reports
// whether reading should go on.
func (p *Proxy) push(l *link, dir direction, b []byte) bool {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.closed {
		return false
	}
	pp := &l.pipes[dir]
	switch {
	case p.blackhole:
		return true
	case dir == replies && p.dropReplies > 0:
		p.dropReplies--
		p.dropped++
		pp.q = append(pp.q, chunk{kind: drop, at: now})
		pp.notify()
		return false
	}
	pp.q = append(pp.q, chunk{kind: data, data: append([]byte(nil), b...), at: now})
	p.buffered += len(b)
	pp.notify()
	return true
}

// pushEOF queues the end of l's dir direction.
func (p *Proxy) pushEOF(l *link, dir direction) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.closed {
		return
	}
	pp := &l.pipes[dir]
	pp.q = append(pp.q, chunk{kind: eof, at: now})
	pp.notify()
}

// write delivers the chunks of l's dir pipe to dst, each when no stall holds
// the direction and its delay has passed, until the link ends.
func (p *Proxy) write(l *link, dir direction, dst *net.TCPConn) {
	pp := &l.pipes[dir]
	for {
		c, wait, ok := p.next(l, dir)
		if !ok {
			return
		}
		if wait != 0 {
			var timer *time.Timer
			var timeout <-chan time.Time
			if wait > 0 {
				timer = time.NewTimer(wait)
				timeout = timer.C
			}
			select {
			case <-pp.wake:
			case <-timeout:
			case <-l.done:
			}
			if timer != nil {
				timer.Stop()
			}
			continue
		}
		switch c.kind {
		case data:
			if _, err := dst.Write(c.data); err != nil {
				p.closeLink(l, true)
				return
			}
		case eof:
			dst.CloseWrite()
			p.mu.Lock()
			l.finished++
			both := l.finished == 2
			p.mu.Unlock()
			if both {
				p.closeLink(l, false)
			}
			return
		case drop:
			p.closeLink(l, true)
			return
		}
	}
}

// next returns the chunk of l's dir pipe to deliver now and removes it from
// the queue, with wait 0; or, with no chunk, how long to wait before looking
// again (-1: until woken). ok is false once the link is closed.
func (p *Proxy) next(l *link, dir direction) (c chunk, wait time.Duration, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.closed {
		return chunk{}, 0, false
	}
	pp := &l.pipes[dir]
	if len(pp.q) == 0 || p.stalls[dir] > 0 {
		return chunk{}, -1, true
	}
	c = pp.q[0]
	if w := time.Until(c.at.Add(p.delay[dir])); w > 0 {
		return chunk{}, w, true
	}
	pp.q[0] = chunk{}
	pp.q = pp.q[1:]
	p.buffered -= len(c.data)
	return c, 0, true
}

// closeLink tears l down once: it forgets l, drops what its pipes hold, and
// closes both connections, with RST if rst.
func (p *Proxy) closeLink(l *link, rst bool) {
	p.mu.Lock()
	if l.closed {
		p.mu.Unlock()
		return
	}
	l.closed = true
	delete(p.links, l)
	for i := range l.pipes {
		for _, c := range l.pipes[i].q {
			p.buffered -= len(c.data)
		}
		l.pipes[i].q = nil
	}
	server := l.server
	close(l.done)
	p.mu.Unlock()
	closeConn(l.client, rst)
	if server != nil {
		closeConn(server, rst)
	}
}

func closeConn(c *net.TCPConn, rst bool) {
	if rst {
		reset(c)
	} else {
		c.Close()
	}
}

// reset closes c with RST instead of FIN: SO_LINGER 0 makes the kernel
// abort the connection, so the peer's next read or write fails with
// ECONNRESET.
func reset(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}
