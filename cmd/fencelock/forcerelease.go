package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/exitcode"
	"github.com/fencelock/fencelock/redisbackend"
)

const forceReleaseUsage = `Usage: fencelock force-release --reason TEXT [flags] KEY

Frees a lock whoever holds it, for operators: a holder that is stuck, or
whose process is gone while its lease is long. Every live hold is released
by its owner token (Client.ForceRelease), so nothing a new holder takes
meanwhile is touched, and the fence counter is left alone: the next holder
gets a larger fence, and the forced-out holder's writes are refused by the
fencing check. The reason and the holder are logged to stderr at WARN.
Look first with "fencelock inspect KEY".

Flags:
`

// runForceRelease implements "fencelock force-release".
func runForceRelease(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fencelock force-release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		redisURL  = fs.String("redis", "", "Redis URL, host:port, or comma-separated Cluster addresses (default $REDIS_URL, else 127.0.0.1:6379)")
		namespace = fs.String("namespace", fencelock.DefaultNamespace, "the Client's namespace (WithNamespace)")
		reason    = fs.String("reason", "", "why the lock is freed, for the log (required)")
	)
	fs.Usage = func() {
		fmt.Fprint(stderr, forceReleaseUsage)
		printFlags(stderr, fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "fencelock force-release: "+format+"\n", a...)
		fmt.Fprintln(stderr, `Run "fencelock force-release -h" for usage.`)
		return 2
	}
	switch {
	case fs.NArg() != 1:
		return bad("want exactly one KEY, got %d", fs.NArg())
	case strings.TrimSpace(*reason) == "":
		return bad("--reason is required: say why the lock is freed")
	}
	key := fs.Arg(0)
	if *redisURL == "" {
		*redisURL = os.Getenv("REDIS_URL")
	}
	rdb, err := dialRedis(*redisURL)
	if err != nil {
		var urlErr *badURLError
		if errors.As(err, &urlErr) {
			return bad("%v", err)
		}
		fmt.Fprintln(stderr, exitcode.Message("fencelock force-release", err))
		return exitcode.CouldNotRun
	}
	defer rdb.Close()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c := fencelock.New(redisbackend.New(rdb, redisbackend.WithoutReleaseNotifications()),
		fencelock.WithNamespace(*namespace), fencelock.WithLogger(logger))
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before, err := c.ForceRelease(ctx, key, *reason)
	if err != nil {
		// Redis failing, or a key or namespace refused: nothing released.
		fmt.Fprintln(stderr, exitcode.Message("fencelock force-release", err))
		return exitcode.CouldNotRun
	}
	if !before.Held {
		fmt.Fprintf(stdout, "%s: not held; nothing released\n", key)
		return 0
	}
	fmt.Fprintf(stdout, "%s: released %d hold(s) of owner %s (fence %d)\n", key, len(before.Holds), before.Owner, before.Fence)
	return 0
}
