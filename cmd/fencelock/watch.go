package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/cmd/internal/exitcode"
	"github.com/fencelock/fencelock/cmd/internal/lockscan"
)

const watchUsage = `Usage: fencelock watch [flags]

Shows the locks held in a namespace live, as "fencelock ls" does, looking
every --interval until interrupted (Ctrl-C). On a terminal the table is
redrawn each time, leases counting down; otherwise (a pipe, a file) a table
is printed only when a lock was taken, released, re-entered or passed on,
or its waiters changed, under a line with the time. --count stops after
that many tables. A Redis that stops answering is reported and looked at
again at the next interval.

Flags:
`

// runWatch implements "fencelock watch".
func runWatch(args []string, stdout, stderr io.Writer) int {
	cmd := newRedisCommand("watch", watchUsage, "the Clients' namespace (WithNamespace)", stderr)
	redisURL, namespace := cmd.redisURL, cmd.namespace
	var (
		interval = cmd.fs.Duration("interval", time.Second, "how often to look, 100ms or more")
		count    = cmd.fs.Int("count", 0, "stop after printing this many tables (0: until interrupted)")
		asJSON   = cmd.fs.Bool("json", false, "print each table as a JSON array on one line")
	)
	rest, code, ok := cmd.parse(args)
	if !ok {
		return code
	}
	switch {
	case len(rest) > 0:
		return usageError(stderr, "watch", "unexpected argument %q (flags only)", rest[0])
	case *interval < 100*time.Millisecond:
		return usageError(stderr, "watch", "invalid --interval %v: want 100ms or more", *interval)
	case *count < 0:
		return usageError(stderr, "watch", "invalid --count %d: want 0 (until interrupted) or more", *count)
	}
	conn, code := connect(stderr, "watch", *redisURL)
	if conn == nil {
		return code
	}
	defer conn.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	redraw := !*asJSON && isTTY(stdout)
	var (
		printed int
		last    []lockKey // what the last table showed; nil before the first
		lastErr string
	)
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, max(*interval, 5*time.Second))
		locks, err := lockscan.List(lctx, conn.rdb, conn.backend, *namespace)
		cancel()
		switch {
		case ctx.Err() != nil:
			return exitcode.OK // interrupted: how a live view is meant to end
		case err != nil:
			if msg := exitcode.Message("fencelock watch", err); msg != lastErr {
				fmt.Fprintln(stderr, msg)
				lastErr = msg
			}
		default:
			lastErr = ""
			rows := rowsOf(locks)
			keys := keysOf(rows)
			if redraw || last == nil || !slices.Equal(keys, last) {
				last = keys
				if err := printWatch(stdout, *namespace, *interval, rows, redraw, *asJSON); err != nil {
					fmt.Fprintln(stderr, exitcode.Message("fencelock watch", err))
					return exitcode.CouldNotRun
				}
				if printed++; *count > 0 && printed >= *count {
					return exitcode.OK
				}
			}
		}
		select {
		case <-ctx.Done():
			return exitcode.OK
		case <-tick.C:
		}
	}
}

// lockKey is what a change is: a lock's holder, fence, holds or waiters,
// a hold of another kind taken or gone, not a lease counting down.
type lockKey struct {
	name, kind, owner, identity, token string
	fence                              int64
	holds                              int
	waiters                            int64
}

func keysOf(rows []row) []lockKey {
	keys := make([]lockKey, 0, len(rows)) // not nil: an empty table was shown
	for _, r := range rows {
		k := lockKey{name: r.name, kind: r.kind, owner: r.owner, identity: r.identity, fence: r.fence, holds: r.holds, waiters: r.waiters}
		if len(r.tokens) > 0 {
			k.token = r.tokens[0]
		}
		keys = append(keys, k)
	}
	return keys
}

// printWatch prints one table, in one write so that a terminal never shows
// half of it.
func printWatch(w io.Writer, namespace string, interval time.Duration, locks []row, redraw, asJSON bool) error {
	var buf bytes.Buffer
	now := time.Now().Format("15:04:05")
	switch {
	case asJSON:
		if err := writeLocksJSON(&buf, locks); err != nil {
			return err
		}
	case redraw:
		// Home and clear the screen, as watch(1) does.
		fmt.Fprintf(&buf, "\x1b[H\x1b[2J%s  every %v, namespace %q, %d held (Ctrl-C to stop)\n\n", now, interval, namespace, len(locks))
		if err := writeLocksTable(&buf, namespace, locks); err != nil {
			return err
		}
	default:
		fmt.Fprintf(&buf, "--- %s: %d held in namespace %q\n", now, len(locks), namespace)
		if len(locks) > 0 {
			if err := writeLocksTable(&buf, namespace, locks); err != nil {
				return err
			}
		}
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// isTTY reports whether w is a terminal.
func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
