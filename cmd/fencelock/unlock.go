package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/cmd/internal/exitcode"
	"github.com/fencelock/fencelock/driver"
)

const unlockUsage = `Usage: fencelock %[1]s --yes [flags] KEY

Frees a lock whoever holds it, for operators: a holder that is stuck, or
whose process is gone while its lease is long. KEY is a name, or a full
Redis key as "fencelock ls" and redis-cli show them. A name frees every
kind of hold of that name: the plain lock, the permits of its semaphore,
the read and write holds of its read-write lock. A key frees its kind
alone: "lock:{NAME}:lock" the plain lock, "lock:{NAME}:sem" the permits,
"lock:{NAME}:rw" the read-write lock's holds.

The holds seen when it starts (and a lock's re-entries by the same holder
meanwhile) are released by their owner tokens (Client.ForceRelease), so
nothing a new holder takes meanwhile is touched, and the fence counters
are left alone: the next holder gets a larger fence, and a forced-out
holder's writes are refused by the fencing check. Its *Lock is lost at
its next renewal.

It refuses to run without --yes. Who ran it (the OS user and host), when,
why (--reason), and the holder's tokens, owner, identity and fence are
logged to stderr as slog lines at WARN: one before anything is released,
and after it the Client's line with the count released and this
command's with the whole tokens. Look first with "fencelock inspect KEY".
"fencelock force-release" is another name for it.

Flags:
`

// runUnlock implements "fencelock unlock".
func runUnlock(args []string, stdout, stderr io.Writer) int {
	return unlock("unlock", args, stdout, stderr)
}

// runForceRelease is "fencelock force-release", unlock's former name.
func runForceRelease(args []string, stdout, stderr io.Writer) int {
	return unlock("force-release", args, stdout, stderr)
}

func unlock(cmd string, args []string, stdout, stderr io.Writer) int {
	rc := newRedisCommand(cmd, fmt.Sprintf(unlockUsage, cmd), "the Client's namespace (WithNamespace); a full Redis KEY names its own", stderr)
	redisURL, namespace, fs := rc.redisURL, rc.namespace, rc.fs
	var (
		reason = fs.String("reason", "", `why the lock is freed, for the log (default "fencelock unlock by USER@HOST")`)
		yes    = fs.Bool("yes", false, "really free the lock (required)")
	)
	rest, code, ok := rc.parse(args)
	if !ok {
		return code
	}
	if len(rest) != 1 {
		return usageError(stderr, cmd, "want exactly one KEY, got %d", len(rest))
	}
	if flagSet(fs, "reason") && strings.TrimSpace(*reason) == "" {
		return usageError(stderr, cmd, "--reason is blank: say why the lock is freed, or leave --reason out")
	}
	ns, name, kinds, err := lockArg(rest[0], *namespace, flagSet(fs, "namespace"))
	if err != nil {
		return usageError(stderr, cmd, "%v", err)
	}
	if !*yes {
		fmt.Fprintf(stderr, "fencelock %s: refusing to free %q without --yes: its holder may still be working, and loses the lock (look first: fencelock inspect %s)\n", cmd, rest[0], rest[0])
		return exitcode.CouldNotRun
	}
	who, host := operator()
	if !flagSet(fs, "reason") {
		*reason = fmt.Sprintf("fencelock %s by %s@%s", cmd, who, host)
	}
	conn, code := connect(stderr, cmd, *redisURL)
	if conn == nil {
		return code
	}
	defer conn.Close()
	// Every line the Client logs (ForceRelease's WARN, before it releases
	// anything) says who did it; slog adds the time.
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).
		With("user", who, "host", host)
	c := fencelock.New(conn.backend, fencelock.WithNamespace(ns), fencelock.WithLogger(logger))
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before, err := c.ForceRelease(ctx, name, *reason, kinds...)
	if err != nil {
		// Redis failing, or a key or namespace refused: nothing released,
		// or (ErrNotAcquired) not all of it.
		fmt.Fprintln(stderr, exitcode.Message("fencelock "+cmd, err))
		return exitcode.CouldNotRun
	}
	lock := before.Held && wants(kinds, fencelock.KindLock)
	var others []driver.HoldInfo
	for _, h := range before.Others {
		if wants(kinds, h.Kind) {
			others = append(others, h)
		}
	}
	if !lock && len(others) == 0 {
		fmt.Fprintf(stdout, "%s: not held; nothing released\n", rest[0])
		return exitcode.OK
	}
	// The whole tokens, not ForceRelease's short ones: they are what the
	// holders' own logs show (Lock.Token).
	var tokens []string
	if lock {
		for _, h := range before.Holds {
			tokens = append(tokens, h.Token)
		}
		logger.Warn("fencelock "+cmd+": released", "key", name, "namespace", ns, "tokens", tokens,
			"owner", before.Owner, "identity", before.Identity, "fence", before.Fence, "reason", *reason)
		line := fmt.Sprintf("%s: released %d hold(s) of owner %s (fence %d)", name, len(before.Holds), before.Owner, before.Fence)
		if before.Identity != "" {
			line += ", held by " + before.Identity
		}
		fmt.Fprintln(stdout, line)
	}
	for _, k := range []struct {
		kind fencelock.Kind
		what string
	}{{fencelock.KindSemaphore, "permit(s)"}, {fencelock.KindRead, "read hold(s)"}, {fencelock.KindWrite, "write hold(s)"}} {
		var tokens []string
		var fences []string
		for _, h := range others {
			if h.Kind == k.kind {
				tokens = append(tokens, h.Token)
				fences = append(fences, strconv.FormatInt(h.Fence, 10))
			}
		}
		if len(tokens) == 0 {
			continue
		}
		logger.Warn("fencelock "+cmd+": released", "key", name, "namespace", ns, "kind", kindName(k.kind),
			"tokens", tokens, "fences", fences, "reason", *reason)
		fmt.Fprintf(stdout, "%s: released %d %s (fences %s)\n", name, len(tokens), k.what, strings.Join(fences, ", "))
	}
	return exitcode.OK
}

// operator returns who runs the command: the OS user's login name and the
// host name, "unknown" when the system does not say.
func operator() (name, host string) {
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	} else if name = os.Getenv("USER"); name == "" {
		name = "unknown"
	}
	if host, _ = os.Hostname(); host == "" {
		host = "unknown"
	}
	return name, host
}
