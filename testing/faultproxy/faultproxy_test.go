package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/testing/faultproxy"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// waitLimit bounds every wait for a condition; generous for a busy CI box.
const waitLimit = 10 * time.Second

// setup starts a redis-server and a proxy to it, and returns the proxy with
// a client through it and a direct client to the server.
func setup(t *testing.T) (p *faultproxy.Proxy, viaProxy, direct *redis.Client) {
	t.Helper()
	srv := servertest.Redis(t)
	p = faultproxy.New(t, srv.Addr())
	return p, newClient(t, p.Addr(), time.Second), newClient(t, srv.Addr(), time.Second)
}

// newClient returns a go-redis client for addr that never retries, with
// readTimeout and short other timeouts, closed at cleanup.
func newClient(t *testing.T, addr string, readTimeout time.Duration) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr:         addr,
		DialTimeout:  time.Second,
		ReadTimeout:  readTimeout,
		WriteTimeout: time.Second,
		MaxRetries:   -1,
	})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// ctx returns a context that ends at cleanup.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return c
}

// waitFor polls cond until it holds, failing the test after waitLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
		}
		<-tick.C
	}
}

// result waits for a command's error from ch, failing after waitLimit.
func result(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(waitLimit):
		t.Fatalf("%s did not return within %v", what, waitLimit)
		return nil
	}
}

// ping opens the client's connection (go-redis's handshake included), so
// that faults armed afterwards hit only the commands that follow.
func ping(t *testing.T, rdb *redis.Client) {
	t.Helper()
	if err := rdb.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
}

// wantValue fails the test unless key holds want on rdb ("" meaning absent).
func wantValue(t *testing.T, rdb *redis.Client, key, want string) {
	t.Helper()
	got, err := rdb.Get(ctx(t), key).Result()
	if errors.Is(err, redis.Nil) {
		got, err = "", nil
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	if got != want {
		t.Fatalf("GET %s = %q, want %q", key, got, want)
	}
}

// isReset reports whether err is what go-redis returns when its connection
// was reset: ECONNRESET, or io.EOF when go-redis's peek at the socket for
// RESP3 push notifications consumed the reset before its read.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)
}

func TestPing(t *testing.T) {
	p, rdb, _ := setup(t)
	ping(t, rdb)
	if got := p.Accepted(); got != 1 {
		t.Errorf("Accepted() = %d, want 1", got)
	}
	if got := p.Conns(); got != 1 {
		t.Errorf("Conns() = %d, want 1", got)
	}
	rdb.Close()
	waitFor(t, "the connection to close", func() bool { return p.Conns() == 0 })
}

func TestDelayReplies(t *testing.T) {
	p, rdb, _ := setup(t)
	ping(t, rdb)
	const d = 200 * time.Millisecond
	p.DelayReplies(d)
	start := time.Now()
	ping(t, rdb)
	if took := time.Since(start); took < d {
		t.Errorf("PING with DelayReplies(%v) took %v", d, took)
	}
	p.DelayReplies(0)
	ping(t, rdb)
}

func TestDelayRequests(t *testing.T) {
	p, _, direct := setup(t)
	rdb := newClient(t, p.Addr(), 5*time.Second)
	ping(t, rdb)
	const d = 200 * time.Millisecond
	p.DelayRequests(d)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- rdb.Set(context.Background(), "k", "v", 0).Err() }()
	// The server cannot have applied the SET before the delay has passed: a
	// GET answered before then must not see it.
	for time.Since(start) < d/2 {
		got := direct.Get(ctx(t), "k").Val()
		if took := time.Since(start); took < d && got != "" {
			t.Fatalf("the server had the value after %v, before the delay %v", took, d)
		}
	}
	if err := result(t, done, "SET"); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if took := time.Since(start); took < d {
		t.Errorf("SET with DelayRequests(%v) took %v", d, took)
	}
	wantValue(t, direct, "k", "v")
}

// TestDelayIsPerChunk checks that chunks are not delayed by one another: a
// delayed reply does not hold back the reading of the next one.
func TestDelayIsPerChunk(t *testing.T) {
	srv := servertest.Redis(t)
	p := faultproxy.New(t, srv.Addr())
	const d, n, gap = 1500 * time.Millisecond, 4, 50 * time.Millisecond
	p.DelayReplies(d)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	for i := range n {
		if _, err := fmt.Fprintf(c, "ECHO m%d\r\n", i); err != nil {
			t.Fatal(err)
		}
		time.Sleep(gap) // separate reads, hence separate chunks
	}
	c.SetReadDeadline(time.Now().Add(waitLimit))
	r := bufio.NewReader(c)
	for i := range n {
		for _, want := range []string{"$2\r\n", fmt.Sprintf("m%d\r\n", i)} {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("reply %d: %v", i, err)
			}
			if line != want {
				t.Fatalf("reply %d: got %q, want %q", i, line, want)
			}
		}
	}
	took := time.Since(start)
	if took < d {
		t.Errorf("replies took %v, less than the delay %v", took, d)
	}
	// Delayed one after another they would take n*d = 6 s.
	if limit := time.Duration(n-1) * d; took >= limit {
		t.Errorf("replies took %v: chunks delayed one another (limit %v)", took, limit)
	}
}

func TestStall(t *testing.T) {
	p, _, direct := setup(t)
	rdb := newClient(t, p.Addr(), waitLimit)
	ping(t, rdb)
	resume := p.Stall()
	done := make(chan error, 1)
	go func() { done <- rdb.Set(context.Background(), "k", "v", 0).Err() }()
	waitFor(t, "the SET to reach the proxy", func() bool { return p.Buffered() > 0 })
	wantValue(t, direct, "k", "") // held: the server has not seen it
	select {
	case err := <-done:
		t.Fatalf("SET returned during the stall: %v", err)
	default:
	}
	resume()
	resume() // no further effect
	if err := result(t, done, "SET"); err != nil {
		t.Fatalf("SET after resume: %v", err)
	}
	wantValue(t, rdb, "k", "v")
	if got := p.Buffered(); got != 0 {
		t.Errorf("Buffered() = %d after resume, want 0", got)
	}
}

func TestStallReplies(t *testing.T) {
	p, _, direct := setup(t)
	rdb := newClient(t, p.Addr(), waitLimit)
	ping(t, rdb)
	resume := p.StallReplies()
	done := make(chan error, 1)
	go func() { done <- rdb.Set(context.Background(), "k", "v", 0).Err() }()
	// The server applies it while the client still waits for the reply.
	waitFor(t, "the server to apply the SET", func() bool {
		return direct.Get(ctx(t), "k").Val() == "v"
	})
	waitFor(t, "the reply to be held", func() bool { return p.Buffered() > 0 })
	select {
	case err := <-done:
		t.Fatalf("SET returned during the stall: %v", err)
	default:
	}
	resume()
	if err := result(t, done, "SET"); err != nil {
		t.Fatalf("SET after resume: %v", err)
	}
}

func TestStallRequests(t *testing.T) {
	p, _, direct := setup(t)
	rdb := newClient(t, p.Addr(), waitLimit)
	ping(t, rdb)
	resume := p.StallRequests()
	defer resume()
	done := make(chan error, 1)
	go func() { done <- rdb.Set(context.Background(), "k", "v", 0).Err() }()
	waitFor(t, "the SET to reach the proxy", func() bool { return p.Buffered() > 0 })
	wantValue(t, direct, "k", "")
	resume()
	if err := result(t, done, "SET"); err != nil {
		t.Fatalf("SET after resume: %v", err)
	}
	wantValue(t, direct, "k", "v")
}

func TestDropNextReply(t *testing.T) {
	p, rdb, direct := setup(t)
	ping(t, rdb)
	p.DropNextReply()
	err := rdb.Set(ctx(t), "k", "v", 0).Err()
	if !isReset(err) {
		t.Fatalf("SET with its reply dropped: err = %v, want a reset", err)
	}
	wantValue(t, direct, "k", "v") // applied all the same
	if got := p.RepliesDropped(); got != 1 {
		t.Errorf("RepliesDropped() = %d, want 1", got)
	}
	// One only: the client works again on a new connection.
	waitFor(t, "the reset connection to go", func() bool { return p.Conns() == 0 })
	wantValue(t, rdb, "k", "v")
	if got := p.RepliesDropped(); got != 1 {
		t.Errorf("RepliesDropped() = %d after a second command, want 1", got)
	}
}

func TestDropReplies(t *testing.T) {
	p, _, direct := setup(t)
	const n = 3
	// Open every connection first: a handshake would eat a drop.
	var clients []*redis.Client
	for range n {
		rdb := newClient(t, p.Addr(), time.Second)
		ping(t, rdb)
		clients = append(clients, rdb)
	}
	p.DropReplies(n)
	for i, rdb := range clients {
		key := fmt.Sprint("k", i)
		err := rdb.Set(ctx(t), key, "v", 0).Err()
		if !isReset(err) {
			t.Fatalf("SET %s: err = %v, want a reset", key, err)
		}
		wantValue(t, direct, key, "v")
	}
	if got := p.RepliesDropped(); got != n {
		t.Errorf("RepliesDropped() = %d, want %d", got, n)
	}
	ping(t, clients[0]) // all used up
	p.DropReplies(5)
	p.DropReplies(0) // disarmed
	ping(t, clients[0])
	if got := p.RepliesDropped(); got != n {
		t.Errorf("RepliesDropped() = %d, want %d", got, n)
	}
}

func TestResetAll(t *testing.T) {
	p, _, direct := setup(t)
	rdb := newClient(t, p.Addr(), waitLimit)
	ping(t, rdb)
	// Keep a command in flight: go-redis would silently replace an idle
	// pooled connection that was reset.
	done := make(chan error, 1)
	go func() { done <- rdb.BLPop(context.Background(), 0, "list").Err() }()
	waitFor(t, "BLPOP to block", func() bool {
		return strings.Contains(direct.Info(ctx(t), "clients").Val(), "blocked_clients:1")
	})
	if got := p.ResetAll(); got != 1 {
		t.Errorf("ResetAll() = %d, want 1", got)
	}
	if err := result(t, done, "BLPOP"); !isReset(err) {
		t.Fatalf("BLPOP after ResetAll: err = %v, want a reset", err)
	}
	waitFor(t, "the server to see the connection go", func() bool {
		return strings.Contains(direct.Info(ctx(t), "clients").Val(), "blocked_clients:0")
	})
	ping(t, rdb) // a new connection works
}

// TestResetsAreRST checks on raw connections that DropNextReply and ResetAll
// reset with RST: the client's read fails with ECONNRESET, not EOF.
func TestResetsAreRST(t *testing.T) {
	srv := servertest.Redis(t)
	p := faultproxy.New(t, srv.Addr())
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(waitLimit))
		r := bufio.NewReader(c)
		rawPing(t, c, r)
		return c, r
	}
	c, r := dial()
	p.DropNextReply()
	if _, err := c.Write([]byte("SET k v\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after DropNextReply: %q, %v; want ECONNRESET", line, err)
	}
	_, r = dial()
	if got := p.ResetAll(); got != 1 {
		t.Errorf("ResetAll() = %d, want 1", got)
	}
	if line, err := r.ReadString('\n'); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after ResetAll: %q, %v; want ECONNRESET", line, err)
	}
}

// rawPing sends PING on c and checks the reply.
func rawPing(t *testing.T, c net.Conn, r *bufio.Reader) {
	t.Helper()
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING: %q, %v", line, err)
	}
}

func TestRefuse(t *testing.T) {
	p, rdb, _ := setup(t)
	ping(t, rdb)
	p.Refuse(true)
	fresh := newClient(t, p.Addr(), time.Second)
	if err := fresh.Ping(ctx(t)).Err(); err == nil {
		t.Fatal("PING on a new connection while refusing: no error")
	}
	if got := p.Refused(); got < 1 {
		t.Errorf("Refused() = %d, want at least 1", got)
	}
	ping(t, rdb) // the open connection is untouched
	p.Refuse(false)
	ping(t, fresh)
	if got, want := p.Accepted(), 2+p.Refused(); got != want {
		t.Errorf("Accepted() = %d, want %d", got, want)
	}
}

func TestBlackhole(t *testing.T) {
	p, _, direct := setup(t)
	rdb := newClient(t, p.Addr(), 300*time.Millisecond)
	ping(t, rdb)
	p.Blackhole(true)
	err := rdb.Set(ctx(t), "k", "v", 0).Err()
	var nerr net.Error
	if !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Fatalf("SET through a blackhole: err = %v, want a timeout", err)
	}
	if got := p.Conns(); got > 1 {
		t.Errorf("Conns() = %d, want at most 1", got)
	}
	wantValue(t, direct, "k", "")
	p.Blackhole(false)
	ping(t, rdb)               // go-redis dropped the timed-out connection; a new one works
	wantValue(t, rdb, "k", "") // the discarded SET never arrives
}

// TestBlackholeKeepsConnectionsOpen checks that a blackhole resets nothing:
// a raw connection stays open and gets no reply.
func TestBlackholeKeepsConnectionsOpen(t *testing.T) {
	srv := servertest.Redis(t)
	p := faultproxy.New(t, srv.Addr())
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "the connection", func() bool { return p.Conns() == 1 })
	p.Blackhole(true)
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := c.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a blackhole: n=%d err=%v, want a timeout", n, err)
	}
	if got := p.Conns(); got != 1 {
		t.Errorf("Conns() = %d, want 1", got)
	}
	p.Blackhole(false)
	c.SetReadDeadline(time.Now().Add(waitLimit))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING after the blackhole: %q, %v", line, err)
	}
}

// TestClose checks that Close ends held connections and returns.
func TestClose(t *testing.T) {
	srv := servertest.Redis(t)
	p, err := faultproxy.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	rdb := newClient(t, p.Addr(), waitLimit)
	ping(t, rdb)
	p.Stall() // never resumed
	p.DelayReplies(time.Hour)
	done := make(chan error, 1)
	go func() { done <- rdb.Set(context.Background(), "k", "v", 0).Err() }()
	waitFor(t, "the SET to reach the proxy", func() bool { return p.Buffered() > 0 })
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	if err := result(t, closed, "Close"); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := result(t, done, "SET"); err == nil {
		t.Error("SET through a closed proxy: no error")
	}
	if got := p.Conns(); got != 0 {
		t.Errorf("Conns() = %d after Close, want 0", got)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Error("dialing a closed proxy: no error")
	}
}

// TestConcurrentFaults switches faults while traffic flows; run with -race.
func TestConcurrentFaults(t *testing.T) {
	p, _, _ := setup(t)
	rdb := newClient(t, p.Addr(), 200*time.Millisecond)
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var calls atomic.Int64
	for i := range 4 {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				rdb.Set(context.Background(), fmt.Sprint("k", i), "v", 0) // errors expected
				calls.Add(1)
			}
		}()
	}
	for range 20 {
		p.DelayReplies(time.Millisecond)
		resume := p.Stall()
		p.Blackhole(true)
		p.DropReplies(1)
		p.Blackhole(false)
		resume()
		p.Refuse(true)
		p.ResetAll()
		p.Refuse(false)
		p.DelayReplies(0)
		p.DropReplies(0)
		// Traffic flows between the switches: a few calls end.
		from := calls.Load()
		waitFor(t, "calls between the fault switches", func() bool { return calls.Load() >= from+4 })
	}
	close(stop)
	for range 4 {
		result(t, errs, "a client goroutine")
	}
	ping(t, rdb)
}
