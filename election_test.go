package fencelock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/childtest"
	"github.com/fencelock/fencelock/memorybackend"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// Leader election against a real redis-server: three
// processes (this test binary re-executed) campaign in a loop for 5s, each
// leader holding office 100ms and resigning. The server counts the leaders
// in office (never more than one) and the terms (each above the last).
func TestElectionOneLeaderAcrossProcesses(t *testing.T) {
	t.Parallel()
	srv, _ := startRedis(t)
	start := time.Now().Add(time.Second)
	var outs []*bufio.Scanner
	var cmds []*exec.Cmd
	for i := range 3 {
		cmd, out := startElectionChild(t, srv.Addr(), electionChildConfig{Mode: "terms", ID: fmt.Sprint("p", i), Start: start, Duration: 5 * time.Second})
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	total := 0
	for i, out := range outs {
		for out.Scan() {
			line := out.Text()
			if n, ok := strings.CutPrefix(line, "TERMS "); ok {
				terms, _ := strconv.Atoi(n)
				t.Logf("process %d led %d terms", i, terms)
				total += terms
			}
			if msg, ok := strings.CutPrefix(line, "FAIL "); ok {
				t.Errorf("process %d: %s", i, msg)
			}
		}
		if err := cmds[i].Wait(); err != nil {
			t.Errorf("process %d: %v", i, err)
		}
	}
	// 5s of 100ms terms: some 40-50 on an idle machine; a busy one hands
	// over slower, but never so slow as to fit fewer than a handful.
	if total < 5 {
		t.Errorf("%d terms in 5s, want hand-overs to keep the election led", total)
	}
}

// Resign hands over at once: the waiting candidate is elected and the
// observer sees it, long before the resigned leader's 30s lease would have
// ended.
func TestElectionResignHandsOver(t *testing.T) {
	_, rdb := startRedis(t)
	a, b, obs := newClient(t, rdb), newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)

	first, err := a.Campaign(ctx, "primary", "node-a", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The observer ends with the test, before the next one begins (its
	// goroutine reads the package's maxObserveWait, which other tests set).
	seen := observeAsync(t, ctx, obs, "primary")
	if l := nextLeader(t, seen, "yielded nothing"); l.ID != "node-a" || l.Term != first.Term() {
		t.Fatalf("observer first saw %+v, want node-a in term %d", l, first.Term())
	}
	elected := make(chan *fencelock.Leadership, 1)
	go func() {
		l, err := b.Campaign(ctx, "primary", "node-b", 30*time.Second)
		if err != nil {
			t.Errorf("Campaign of node-b: %v", err)
		}
		elected <- l
	}()
	time.Sleep(300 * time.Millisecond) // node-b is waiting
	select {
	case <-elected:
		t.Fatal("node-b elected while node-a leads")
	default:
	}
	resigned := time.Now()
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var second *fencelock.Leadership
	select {
	case second = <-elected:
	case <-time.After(5 * time.Second):
		t.Fatal("node-b not elected within 5s of the resignation (the lease was 30s)")
	}
	if second == nil {
		return
	}
	t.Logf("node-b elected %v after node-a resigned", time.Since(resigned).Round(time.Millisecond))
	if second.Term() <= first.Term() {
		t.Errorf("term %d not above %d", second.Term(), first.Term())
	}
	for {
		l := nextLeader(t, seen, "did not see node-b")
		if l.ID == "node-b" {
			if l.Term != second.Term() {
				t.Errorf("observer saw node-b in term %d, want %d", l.Term, second.Term())
			}
			break
		}
		if l.ID != "" || time.Since(resigned) > 5*time.Second {
			t.Fatalf("observer saw %+v after the resignation, want (nobody, then) node-b within 5s", l)
		}
	}
	if !errors.Is(first.Err(), fencelock.ErrReleased) {
		t.Errorf("resigned leadership's Err = %v, want ErrReleased", first.Err())
	}
	if l, err := obs.Leader(ctx, "primary"); err != nil || l.ID != "node-b" || l.Term != second.Term() || l.TTL <= 0 {
		t.Errorf("Leader = %+v, %v; want node-b", l, err)
	}
	second.Resign(ctx)
}

// A leader whose process is killed -9 is replaced once its lease (2s) has
// run out, not before; the new term is higher.
func TestElectionKilledLeaderReplaced(t *testing.T) {
	t.Parallel()
	srv, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	cmd, out := startElectionChild(t, srv.Addr(), electionChildConfig{Mode: "lead", ID: "doomed"})
	for out.Scan() && !strings.HasPrefix(out.Text(), "LEADER ") {
	}
	oldTerm, _ := strconv.ParseInt(strings.TrimPrefix(out.Text(), "LEADER "), 10, 64)
	if oldTerm <= 0 {
		t.Fatalf("the child did not report its term: %q", out.Text())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	cmd.Wait()
	if l, err := c.Leader(ctx, "svc"); err != nil || l.ID != "doomed" || l.TTL > 2*time.Second {
		t.Fatalf("after the kill: %+v, %v; want the dead leader, with at most 2s left", l, err)
	}
	l, err := c.Campaign(ctx, "svc", "successor", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	took := time.Since(killed)
	t.Logf("successor elected %v after the kill", took.Round(time.Millisecond))
	if took > 7*time.Second {
		t.Errorf("successor elected %v after the kill, want about the 2s lease", took)
	}
	if l.Term() <= oldTerm {
		t.Errorf("term %d not above the dead leader's %d", l.Term(), oldTerm)
	}
}

// A leadership whose lock is lost (deleted on the server, as a failover
// can) is told through Done and Err, and its Context is cancelled with
// cause ErrLost.
func TestElectionLoss(t *testing.T) {
	t.Parallel()
	_, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 20*time.Second)
	l, err := c.Campaign(ctx, "loser", "me", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := l.Context(ctx)
	defer cancel()
	rdb.Del(ctx, "lock:{election:loser}:lock")
	waitDone(t, l.Done(), 5*time.Second, "loss of the leadership")
	if !errors.Is(l.Err(), fencelock.ErrLost) || !errors.Is(context.Cause(lctx), fencelock.ErrLost) {
		t.Errorf("Err = %v, context cause = %v; want ErrLost", l.Err(), context.Cause(lctx))
	}
}

// Ids must differ: a second candidate with the leader's id is refused; bad
// arguments are named.
func TestElectionArguments(t *testing.T) {
	_, rdb := startRedis(t)
	a, b := newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 10*time.Second)
	l, err := a.Campaign(ctx, "e", "same", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Campaign(ctx, "e", "same", 5*time.Second); !errors.Is(err, fencelock.ErrInvalidArgument) || !strings.Contains(err.Error(), "id of its own") {
		t.Errorf("a second candidate with the leader's id: %v, want ErrInvalidArgument", err)
	}
	if info, _ := a.Inspect(ctx, "election:e"); len(info.Holds) != 1 || l.Err() != nil {
		t.Errorf("after the refused candidate: %+v, %v; want the leader's one hold", info, l.Err())
	}
	for _, tc := range []struct{ election, id string }{{"", "x"}, {"e", ""}} {
		if _, err := a.Campaign(ctx, tc.election, tc.id, time.Second); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("Campaign(%q, %q): %v, want ErrInvalidArgument", tc.election, tc.id, err)
		}
	}
	if _, err := a.Campaign(ctx, "e", "x", 0); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Errorf("Campaign with ttl 0: %v", err)
	}
	for _, err := range a.Observe(ctx, "") {
		if !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("Observe(\"\"): %v", err)
		}
	}
}

// elShared gives several Clients one memory backend with an Inspector (so
// that Observe works) but without Close.
type elShared struct {
	driver.Store
	driver.Notifier
	driver.Inspector
}

// Observe sees a resignation at once on Redis, though no candidate waits
// (nothing was refused, so the release script alone would publish
// nothing): Campaign's releases ask the backend to notify. The observer's
// fallback is set to a minute, so without the notification it would see
// the resignation only a minute later.
func TestElectionObserveSeesResignation(t *testing.T) {
	fencelock.SetMaxObserveWait(t, time.Minute)
	srv, _ := startRedis(t)
	leaderClient := newClient(t, newRedisClient(t, srv.Addr()))
	observer := newClient(t, newRedisClient(t, srv.Addr()))
	ctx := ctxTimeout(t, time.Minute)

	lead, err := leaderClient.Campaign(ctx, "e", "L", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	leaders := observeAsync(t, ctx, observer, "e")

	if l := nextLeader(t, leaders, "yielded nothing"); l.ID != "L" || l.Term != lead.Term() {
		t.Fatalf("first observed %+v, want L in term %d", l, lead.Term())
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	resigned := time.Now()
	if l := nextLeader(t, leaders, "did not see the resignation (its fallback is a minute): no release notification"); l.ID != "" {
		t.Fatalf("after the resignation Observe yielded %+v, want no leader", l)
	}
	t.Logf("no leader observed %v after Resign returned", time.Since(resigned).Round(time.Millisecond))
}

// observeAsync runs Observe of election on c until the test ends, and
// returns what it yields (an error fails the test).
func observeAsync(t *testing.T, ctx context.Context, c *fencelock.Client, election string) <-chan fencelock.Leader {
	ctx, stop := context.WithCancel(ctx)
	leaders := make(chan fencelock.Leader, 8)
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for l, err := range c.Observe(ctx, election) {
			if err != nil {
				t.Errorf("Observe: %v", err)
				continue
			}
			leaders <- l
		}
	}()
	t.Cleanup(func() { stop(); <-observed })
	return leaders
}

// nextLeader returns the next leader observed, failing the test with "Observe
// <failure> within 20s" if none comes.
func nextLeader(t *testing.T, leaders <-chan fencelock.Leader, failure string) fencelock.Leader {
	t.Helper()
	select {
	case l := <-leaders:
		return l
	case <-time.After(20 * time.Second):
		t.Fatalf("Observe %s within 20s", failure)
		return fencelock.Leader{}
	}
}

// Observe, deterministically: it yields the current leader, wakes on the
// release notification of a resignation, and sees the successor within the
// first poll after it; without an Inspector it yields ErrUnsupported.
func TestElectionObserveTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		shared := elShared{e.b, e.b, e.b}
		a := fencelock.New(shared)
		b := fencelock.New(shared)
		obs := fencelock.New(shared)
		t.Cleanup(func() { a.Close(); b.Close(); obs.Close() })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		first, err := a.Campaign(ctx, "e", "a", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		seen := sightings(t, ctx, obs, "e", e.start)
		go b.Campaign(ctx, "e", "b", 3*time.Second)
		synctest.Wait()
		if s := <-seen; s.l.ID != "a" || s.at != 0 {
			t.Fatalf("first sighting %+v, want a at 0", s)
		}
		time.Sleep(10 * time.Second) // a renews; nothing changes
		synctest.Wait()
		if len(seen) != 0 {
			t.Fatalf("sightings while nothing changed: %v", <-seen)
		}
		first.Resign(ctx)
		resigned := e.now()
		var s sighting
		for s = range seen {
			if s.l.ID == "b" {
				break
			}
		}
		if s.l.ID != "b" || s.at-resigned > 50*time.Millisecond || s.l.Term <= first.Term() {
			t.Errorf("successor seen as %+v at %v after the resignation, want b with a higher term within one short poll", s.l, s.at-resigned)
		}

		plain := e.client("plain")
		for _, err := range plain.Observe(ctx, "e") {
			if !errors.Is(err, fencelock.ErrUnsupported) {
				t.Errorf("Observe without an Inspector: %v, want ErrUnsupported", err)
			}
		}
		cancel()
	})
}

// elChangeShared is elShared with its own Inspector.
type elChangeShared struct {
	driver.Store
	driver.Notifier
	driver.Inspector
}

// countedInspector counts the looks of Observe.
type countedInspector struct {
	driver.Inspector
	looks atomic.Int32
}

func (c *countedInspector) InspectLock(ctx context.Context, namespace, key string) (fencelock.LockInfo, error) {
	c.looks.Add(1)
	return c.Inspector.InspectLock(ctx, namespace, key)
}

// Observe, deterministically, with a backend that notifies acquisitions
// (driver.WatchRequest.Changes): it sees a new leader at the instant Campaign takes the
// election, not at its next look (up to a second later), and it does not
// keep looking at an election without a leader.
func TestElectionObserveSeesNewLeaderAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		inspector := &countedInspector{Inspector: e.b}
		shared := elChangeShared{e.b, e.b, inspector}
		a := fencelock.New(shared)
		obs := fencelock.New(shared)
		t.Cleanup(func() { a.Close(); obs.Close() })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		seen := sightings(t, ctx, obs, "e", e.start)
		synctest.Wait()
		if s := <-seen; s.l.ID != "" || s.at != 0 {
			t.Fatalf("first sighting %+v at %v, want no leader at 0", s.l, s.at)
		}
		looks := inspector.looks.Load()
		time.Sleep(10*time.Second + 300*time.Millisecond)
		synctest.Wait()
		if n := inspector.looks.Load() - looks; n > 11 {
			t.Errorf("Observe looked %d times in 10.3s at an election without a leader, want one a second at most", n)
		}
		campaigned := e.now()
		lead, err := a.Campaign(ctx, "e", "a", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		expectSighting(t, seen, "a", lead.Term(), campaigned, "when it was elected")
		cancel()
	})
}

// With WithFairness, a resignation hands the election to the next candidate
// in the server's line (a grant, in the release's own step): the in-memory
// backend tells change watchers of that acquisition too, so Observe sees
// the successor at the instant of the resignation, not at its next look.
func TestElectionObserveSeesGrantedSuccessorAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybackend.New()
		t.Cleanup(func() { b.Close() })
		a, c, obs := fencelock.New(b), fencelock.New(b), fencelock.New(b)
		t.Cleanup(func() { a.Close(); c.Close(); obs.Close() })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		start := time.Now()

		lead, err := a.Campaign(ctx, "e", "a", 3*time.Second, fencelock.WithFairness())
		if err != nil {
			t.Fatal(err)
		}
		next := make(chan *fencelock.Leadership, 1)
		go func() {
			l, err := c.Campaign(ctx, "e", "c", 3*time.Second, fencelock.WithFairness())
			if err != nil {
				t.Errorf("second Campaign: %v", err)
			}
			next <- l
		}()
		seen := sightings(t, ctx, obs, "e", start)
		time.Sleep(500 * time.Millisecond) // the candidate waits in line
		synctest.Wait()
		if s := <-seen; s.l.ID != "a" {
			t.Fatalf("first sighting %+v, want a", s.l)
		}
		resigned := time.Since(start)
		if err := lead.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		successor := <-next
		expectSighting(t, seen, "c", successor.Term(), resigned, "at the resignation that granted it the election")
		cancel()
	})
}

// sighting is a leader Observe yielded, and when: the time since the
// test's start (virtual time, in a synctest bubble).
type sighting struct {
	l  fencelock.Leader
	at time.Duration
}

// sightings runs Observe of election on c until ctx ends, and returns what
// it yields, stamped with the time since start (an error fails the test).
func sightings(t *testing.T, ctx context.Context, c *fencelock.Client, election string, start time.Time) <-chan sighting {
	seen := make(chan sighting, 16)
	go func() {
		for l, err := range c.Observe(ctx, election) {
			if err != nil {
				t.Errorf("Observe: %v", err)
			}
			seen <- sighting{l, time.Since(start)}
		}
	}()
	return seen
}

// expectSighting waits until every goroutine of the bubble is blocked, then
// checks that Observe has yielded leader id in term at the instant at
// (described by when).
func expectSighting(t *testing.T, seen <-chan sighting, id string, term int64, at time.Duration, when string) {
	t.Helper()
	synctest.Wait()
	select {
	case s := <-seen:
		if s.l.ID != id || s.l.Term != term || s.at != at {
			t.Errorf("sighting %+v at %v, want %s in term %d at %v, %s", s.l, s.at, id, term, at, when)
		}
	default:
		t.Errorf("Observe did not see %s %s", id, when)
	}
}

// Observe sees a new leader at once on Redis: Campaign publishes its
// acquisition. The observer's fallback is set to a minute, so without the
// notification it would see the leader only a minute later.
func TestElectionObserveSeesNewLeader(t *testing.T) {
	fencelock.SetMaxObserveWait(t, time.Minute)
	srv, _ := startRedis(t)
	candidate := newClient(t, newRedisClient(t, srv.Addr()))
	observer := newClient(t, newRedisClient(t, srv.Addr()))
	ctx := ctxTimeout(t, time.Minute)

	leaders := observeAsync(t, ctx, observer, "e")

	if l := nextLeader(t, leaders, "yielded nothing"); l.ID != "" {
		t.Fatalf("first observed %+v, want no leader", l)
	}
	lead, err := candidate.Campaign(ctx, "e", "L", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	elected := time.Now()
	if l := nextLeader(t, leaders, "did not see the new leader (its fallback is a minute): no notification of the acquisition"); l.ID != "L" || l.Term != lead.Term() {
		t.Fatalf("after the election Observe yielded %+v, want L in term %d", l, lead.Term())
	}
	t.Logf("new leader observed %v after Campaign returned", time.Since(elected).Round(time.Millisecond))
}

// electionChildConfig tells a child process (TestElectionChild) what to do.
type electionChildConfig struct {
	Mode     string // "terms": campaign, lead 100ms, resign, until Duration is over; "lead": lead until killed
	ID       string
	Start    time.Time
	Duration time.Duration
}

func startElectionChild(t *testing.T, addr string, cfg electionChildConfig) (*exec.Cmd, *bufio.Scanner) {
	return childtest.Start(t, "TestElectionChild", "FENCELOCK_ELECTION_CHILD", addr, cfg)
}

// TestElectionChild is the body of the child processes of the election
// tests; it does nothing unless started by one.
func TestElectionChild(t *testing.T) {
	var cfg electionChildConfig
	addr, ok := childtest.Spec(t, "FENCELOCK_ELECTION_CHILD", &cfg)
	if !ok {
		return
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	c := fencelock.New(redisbackend.New(rdb))
	defer c.Close()
	ctx := context.Background()
	switch cfg.Mode {
	case "lead":
		l, err := c.Campaign(ctx, "svc", cfg.ID, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("LEADER %d\n", l.Term())
		select {} // killed here
	case "terms":
		time.Sleep(time.Until(cfg.Start))
		end := cfg.Start.Add(cfg.Duration)
		terms := 0
		for time.Now().Before(end) {
			cctx, cancel := context.WithDeadline(ctx, end)
			l, err := c.Campaign(cctx, "rotating", cfg.ID, 2*time.Second)
			cancel()
			if errors.Is(err, fencelock.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
				// The time is over: while this candidate waited (not
				// acquired), or while its only attempt was on its way (no
				// reply yet, so the outcome is unknown: an outage as far
				// as the caller can tell, and the lock is released if it
				// was taken).
				break
			}
			if err != nil {
				fmt.Printf("FAIL campaign: %v\n", err)
				break
			}
			terms++
			if n := rdb.Incr(ctx, "in-office").Val(); n != 1 {
				fmt.Printf("FAIL %d leaders in office at once\n", n)
			}
			last, _ := strconv.ParseInt(rdb.Get(ctx, "last-term").Val(), 10, 64)
			if l.Term() <= last {
				fmt.Printf("FAIL term %d after term %d\n", l.Term(), last)
			}
			rdb.Set(ctx, "last-term", l.Term(), 0)
			time.Sleep(100 * time.Millisecond)
			if l.Err() != nil {
				fmt.Printf("FAIL lost office: %v\n", l.Err())
			}
			rdb.Decr(ctx, "in-office")
			if err := l.Resign(ctx); err != nil {
				fmt.Printf("FAIL resign: %v\n", err)
			}
		}
		fmt.Printf("TERMS %d\n", terms)
	}
}
