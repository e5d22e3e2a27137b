package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/cmd/internal/exitcode"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

const inspectUsage = `Usage: fencelock inspect [flags] KEY...

Shows what Redis holds about each lock, in the order one troubleshoots a
stuck or lost lock: is it held, by which owner (and which process, when
its Client gave an identity: fencelock.WithIdentity), with which fence,
for how much longer (the server's PTTL), the last fence minted, and how
many processes wait for it; then the permits of the semaphore and the
read and write holds of the read-write lock of the same name, when any
is held, each with its fence and lease. It changes nothing.

KEY is a name ("orders:42", in --namespace: every kind) or a full Redis
key, as "fencelock ls" and redis-cli show it: "lock:{orders:42}:lock" (the
plain lock), "lock:{partner-api}:sem" (the semaphore), "lock:{doc}:rw"
(the read-write lock); another Redis key of a name is refused. Flags may
follow it. --json prints every kind of the name: the plain lock's fields,
and the other holds in "others".

Flags:
`

// runInspect implements "fencelock inspect".
func runInspect(args []string, stdout, stderr io.Writer) int {
	cmd := newRedisCommand("inspect", inspectUsage, "the Client's namespace (WithNamespace)", stderr)
	redisURL, namespace, fs := cmd.redisURL, cmd.namespace, cmd.fs
	var (
		asJSON = fs.Bool("json", false, "print JSON")
		watch  = fs.Duration("watch", 0, "print again every interval until interrupted (e.g. 1s)")
	)
	keys, code, ok := cmd.parse(args)
	if !ok {
		return code
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "fencelock inspect: "+format+"\n", a...)
		fmt.Fprintln(stderr, `Run "fencelock inspect -h" for usage.`)
		return 2
	}
	if len(keys) == 0 {
		return bad("no KEY given")
	}
	type lockName struct {
		arg, namespace, name string
		kinds                []fencelock.Kind // nil: every kind
	}
	var names []lockName
	for _, arg := range keys {
		ns, name, kinds, err := lockArg(arg, *namespace, flagSet(fs, "namespace"))
		if err != nil {
			return bad("%v", err)
		}
		names = append(names, lockName{arg, ns, name, kinds})
	}
	if *watch < 0 {
		return bad("invalid --watch %v: must not be negative", *watch)
	}
	if *redisURL == "" {
		*redisURL = os.Getenv("REDIS_URL")
	}
	rdb, err := dialRedis(*redisURL)
	if err != nil {
		var urlErr *badURLError
		if errors.As(err, &urlErr) {
			return bad("%v", err)
		}
		// Not a usage error: Redis did not answer, or refused us.
		fmt.Fprintln(stderr, exitcode.Message("fencelock inspect", err))
		return couldNotRunCode(err)
	}
	defer rdb.Close()
	backend := redisbackend.New(rdb, redisbackend.WithoutReleaseNotifications())
	defer backend.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for {
		for _, n := range names {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			info, err := backend.Inspect(rctx, n.namespace, n.name)
			cancel()
			if err != nil {
				// A namespace or key the backend refuses, or Redis
				// failing: either way no answer.
				fmt.Fprintln(stderr, exitcode.Message("fencelock inspect", fmt.Errorf("%s: %w", n.arg, err)))
				return exitcode.CouldNotRun
			}
			if *asJSON {
				printInfoJSON(stdout, n.name, info)
			} else {
				printInfo(stdout, info, n.kinds)
			}
		}
		if *watch == 0 {
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(*watch):
		}
	}
}

// badURLError is a --redis value that is no URL (a usage error).
type badURLError struct{ err error }

func (e *badURLError) Error() string { return fmt.Sprintf("invalid --redis URL: %v", e.err) }

// dialRedis connects to a URL, a host:port, or comma-separated Cluster
// addresses, and checks that the server answers.
func dialRedis(addr string) (redis.UniversalClient, error) {
	var rdb redis.UniversalClient
	switch {
	case addr == "":
		rdb = redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
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
		rdb = redis.NewClient(opt)
	default:
		rdb = redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(addr, ",")})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, redisDialError(err)
	}
	return rdb, nil
}

// printInfo prints what Redis holds about a name: the plain lock, and the
// semaphore and the read-write lock when they have holds; with kinds (a
// full key was given), the sections of those kinds alone, held or not.
func printInfo(w io.Writer, info redisbackend.Inspection, kinds []fencelock.Kind) {
	if wants(kinds, fencelock.KindLock) {
		printLock(w, info)
	}
	var permits, reads, writes []driver.HoldInfo
	for _, h := range info.Others {
		switch h.Kind {
		case fencelock.KindSemaphore:
			permits = append(permits, h)
		case fencelock.KindRead:
			reads = append(reads, h)
		case fencelock.KindWrite:
			writes = append(writes, h)
		}
	}
	if kinds != nil && wants(kinds, fencelock.KindSemaphore) || kinds == nil && len(permits) > 0 {
		state := "free"
		if len(permits) > 0 {
			state = fmt.Sprintf("%d permit(s) held", len(permits))
		}
		printHolds(w, info.Semaphore, state, permits, nil)
	}
	if kinds != nil && wants(kinds, fencelock.KindRead) || kinds == nil && len(reads)+len(writes) > 0 {
		state := "free"
		switch {
		case len(writes) > 0:
			state = "held by a writer"
		case len(reads) > 0:
			state = fmt.Sprintf("held by %d reader(s)", len(reads))
		}
		var waiting []string
		if n := info.RW.WaitingWriters; n > 0 {
			waiting = append(waiting, fmt.Sprintf("%d writer(s), keeping new readers out", n))
		}
		if n := info.RW.WaitingReaders; n > 0 {
			waiting = append(waiting, fmt.Sprintf("%d reader(s), let in when the writer leaves", n))
		}
		printHolds(w, info.RW, state, append(writes, reads...), waiting)
	}
}

// printLock prints the plain lock's section.
func printLock(w io.Writer, info redisbackend.Inspection) {
	fmt.Fprintf(w, "%s\n", info.LockKey)
	if info.Held {
		fmt.Fprintf(w, "  state     held, %d hold(s), lease ends in %v (server PTTL)\n", len(info.Holds), info.TTL.Round(time.Millisecond))
		fmt.Fprintf(w, "  owner     %s\n", info.Owner)
		if info.Identity != "" {
			fmt.Fprintf(w, "  identity  %s\n", info.Identity)
		}
		fmt.Fprintf(w, "  fence     %d\n", info.Fence)
		for _, h := range info.Holds {
			fmt.Fprintf(w, "  hold      token %s, lease ends in %v\n", shorten(h.Token), h.TTL.Round(time.Millisecond))
		}
	} else {
		fmt.Fprintf(w, "  state     free\n")
	}
	switch {
	case info.LastFence == 0:
		fmt.Fprintf(w, "  counter   %s: none (no acquisition yet, or expired)\n", info.FenceKey)
	case info.CounterTTL < 0:
		fmt.Fprintf(w, "  counter   %s = %d (never expires)\n", info.FenceKey, info.LastFence)
	default:
		fmt.Fprintf(w, "  counter   %s = %d (expires in %v)\n", info.FenceKey, info.LastFence, info.CounterTTL.Round(time.Second))
	}
	fmt.Fprintf(w, "  waiters   %d subscribed to %s\n", info.Waiters, info.Channel)
}

// printHolds prints the section of a semaphore or a read-write lock: its
// state, each hold, the places of its waiters, its counter and waiters.
func printHolds(w io.Writer, hi redisbackend.HoldsInspection, state string, holds []driver.HoldInfo, waiting []string) {
	fmt.Fprintf(w, "%s\n", hi.Key)
	fmt.Fprintf(w, "  state     %s\n", state)
	for _, h := range holds {
		fmt.Fprintf(w, "  %-9s token %s, fence %d, lease ends in %v\n", kindName(h.Kind), shorten(h.Token), h.Fence, h.TTL.Round(time.Millisecond))
	}
	for _, line := range waiting {
		fmt.Fprintf(w, "  waiting   %s\n", line)
	}
	if hi.LastFence == 0 {
		fmt.Fprintf(w, "  counter   %s: none (no acquisition yet, or expired)\n", hi.FenceKey)
	} else {
		fmt.Fprintf(w, "  counter   %s = %d\n", hi.FenceKey, hi.LastFence)
	}
	fmt.Fprintf(w, "  waiters   %d subscribed to %s\n", hi.Waiters, hi.Channel)
}

// holdJSON is a hold of a semaphore or a read-write lock in inspect's JSON.
type holdJSON struct {
	Kind      string `json:"kind"`      // "permit", "read" or "write"
	RedisKey  string `json:"redis_key"` // the key that keeps it
	Token     string `json:"token"`
	Fence     int64  `json:"fence"`
	TTLMillis int64  `json:"ttl_ms"`
}

func printInfoJSON(w io.Writer, key string, info redisbackend.Inspection) {
	tokens := make([]string, 0, len(info.Holds))
	for _, h := range info.Holds {
		tokens = append(tokens, h.Token)
	}
	others := make([]holdJSON, 0, len(info.Others))
	for _, h := range info.Others {
		redisKey := info.RW.Key
		if h.Kind == fencelock.KindSemaphore {
			redisKey = info.Semaphore.Key
		}
		others = append(others, holdJSON{kindName(h.Kind), redisKey, h.Token, h.Fence, h.TTL.Milliseconds()})
	}
	out := struct {
		Key          string     `json:"key"`
		LockKey      string     `json:"lock_key"`
		Held         bool       `json:"held"`
		Owner        string     `json:"owner,omitempty"`
		Identity     string     `json:"identity,omitempty"`
		Fence        int64      `json:"fence,omitempty"`
		Holds        int        `json:"holds,omitempty"`
		Tokens       []string   `json:"tokens,omitempty"`
		TTLMillis    int64      `json:"ttl_ms"`
		LastFence    int64      `json:"last_fence"`
		CounterTTLMs int64      `json:"counter_ttl_ms"`
		Waiters      int64      `json:"waiters"`
		Others       []holdJSON `json:"others"`
	}{key, info.LockKey, info.Held, info.Owner, info.Identity, info.Fence, len(info.Holds), tokens,
		info.TTL.Milliseconds(), info.LastFence, info.CounterTTL.Milliseconds(), info.Waiters, others}
	if info.CounterTTL < 0 {
		out.CounterTTLMs = -1
	}
	b, _ := json.Marshal(out)
	fmt.Fprintf(w, "%s\n", b)
}

// shorten shows enough of an owner token to tell holds apart.
func shorten(token string) string {
	if len(token) > 8 {
		return token[:8] + "…"
	}
	return token
}
