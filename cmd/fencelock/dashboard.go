package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/cmd/internal/dashboard"
	"github.com/fencelock/fencelock/cmd/internal/exitcode"
	"github.com/redis/go-redis/v9"
)

const dashboardUsage = `Usage: fencelock dashboard [flags]

Serves a web page of a namespace's locks, live: each held lock with its
holder (its identity when the Client has WithIdentity, and its owner
token), fence, lease left (counting down), holds and waiters; and the
recent events: a lock taken, passed on (its fence changed), released
(gone before its lease ran out) or expired (gone when its lease ran out:
its holder lost it), with the time each was seen.

The dashboard looks at Redis every --interval (a SCAN of the namespace's
lock keys, on every master of a Cluster, and one round trip per lock), and
at once when a release is published, and pushes each look to every open
page (server-sent events). It changes nothing in Redis. While Redis does
not answer, the page says "Redis unreachable" and the dashboard keeps
trying. Ctrl-C stops it.

It listens on loopback by default: the page shows lock names and holders
to whoever can reach it, and has no login.

Flags:
`

// runDashboard implements "fencelock dashboard".
func runDashboard(args []string, stdout, stderr io.Writer) int {
	cmd := newRedisCommand("dashboard", dashboardUsage, "the Clients' namespace (WithNamespace)", stderr)
	redisURL, namespace, fs := cmd.redisURL, cmd.namespace, cmd.fs
	var (
		listen   = fs.String("listen", "127.0.0.1:8080", "address to serve the page on (host:port; port 0 picks a free one)")
		interval = fs.Duration("interval", dashboard.DefaultInterval, "time between two looks at Redis, 10ms to 1m")
		maxLocks = fs.Int("max-locks", dashboard.DefaultMaxLocks, "locks to inspect and show, the first by name, 1 to 10000 (the page says how many more there are)")
	)
	rest, code, ok := cmd.parse(args)
	if !ok {
		return code
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "fencelock dashboard: "+format+"\n", a...)
		fmt.Fprintln(stderr, `Run "fencelock dashboard -h" for usage.`)
		return 2
	}
	if len(rest) > 0 {
		return bad("unexpected argument %q (flags only)", rest[0])
	}
	if *namespace == "" {
		return bad(`invalid --namespace "": the dashboard needs a namespace (a Client's is never empty unless WithNamespace("") was given)`)
	}
	if *redisURL == "" {
		*redisURL = os.Getenv("REDIS_URL")
	}
	// Zero means "the default" to dashboard.New; on the command line it
	// is a mistake.
	if *interval <= 0 {
		return refused(stderr, &fencelock.InvalidArgumentError{Name: "interval", Value: interval.String(), Reason: "want 10ms to 1m"})
	}
	if *maxLocks <= 0 {
		return refused(stderr, &fencelock.InvalidArgumentError{Name: "max locks", Value: fmt.Sprint(*maxLocks), Reason: "want 1 to 10000"})
	}
	rdb, err := redisClient(*redisURL)
	if err != nil {
		return bad("%v", err)
	}
	defer rdb.Close()
	// go-redis logs every failed dial while Redis is down; the dashboard
	// reports the outage once, and on the page.
	redis.SetLogger(quietRedisLog{})
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	d, err := dashboard.New(rdb, dashboard.Options{Namespace: *namespace, Interval: *interval, MaxLocks: *maxLocks, Logger: logger})
	if err != nil {
		return refused(stderr, err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, exitcode.Message("fencelock dashboard", fmt.Errorf("cannot listen on --listen %q: %w", *listen, err)))
		return exitcode.CouldNotRun
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		fmt.Fprintf(stderr, "fencelock dashboard: warning: listening on %s, not loopback: whoever reaches it sees the lock names and holders (there is no login)\n", ln.Addr())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stdout, "fencelock dashboard: namespace %q on http://%s/ (Ctrl-C stops)\n", *namespace, pageHost(ln.Addr()))
	// A Redis that does not answer yet is no reason not to start: the page
	// says so, and the dashboard keeps trying.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := rdb.Ping(pctx).Err(); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "fencelock dashboard: Redis does not answer yet (%v); the page says so until it does\n", err)
	}
	cancel()
	if err := d.Serve(ctx, ln); err != nil {
		fmt.Fprintln(stderr, exitcode.Message("fencelock dashboard", err))
		return exitcode.CouldNotRun
	}
	return exitcode.OK
}

// refused reports a flag's value that dashboard.New (or the same rule)
// refuses: the error names it; no pointer to -h, the usage was right.
func refused(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, exitcode.Message("fencelock dashboard", err))
	return exitcode.CouldNotRun
}

// pageHost is addr as a browser can open it: a wildcard address becomes
// localhost.
func pageHost(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return addr.String()
	}
	if tcp.IP.IsUnspecified() {
		return net.JoinHostPort("localhost", fmt.Sprint(tcp.Port))
	}
	return tcp.String()
}

// redisClient makes a client of a URL, a host:port, or comma-separated
// Cluster addresses, without connecting: unlike the one-shot commands'
// dialRedis, the dashboard starts while Redis is down and waits for it.
func redisClient(addr string) (redis.UniversalClient, error) {
	switch {
	case addr == "":
		return redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true}), nil
	case strings.Contains(addr, "://"):
		opt, err := redis.ParseURL(addr)
		if err != nil {
			// url.Parse's errors quote the whole URL, password included.
			var urlErr *url.Error
			if errors.As(err, &urlErr) {
				err = urlErr.Err
			}
			return nil, &badURLError{err}
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewClient(opt), nil
	default:
		return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(addr, ","), ContextTimeoutEnabled: true}), nil
	}
}

// quietRedisLog drops go-redis's log lines.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}
