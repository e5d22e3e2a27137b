package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/internal/exitcode"
	"github.com/fencelock/fencelock/internal/lockscan"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

const lsUsage = `Usage: fencelock ls [flags]

Lists the locks held in a namespace, one line each: the lock's name, the
owner token of its hold (the first, when its owner re-entered it), its
owner when it was taken WithOwner, the holder's identity when its Client
gave one (fencelock.WithIdentity: host:pid, a pod name), its fence, the
lease left (the server's PTTL), its holds, and how many Clients wait for it
(subscribers of its release channel; on a Cluster, those connected to the
node that answered). It changes nothing. Keys are found with SCAN, on
every master of a Cluster, so it does not block Redis as KEYS would.

Give "fencelock inspect" a name or the full key for the details of one.

Flags:
`

// runLs implements "fencelock ls".
func runLs(args []string, stdout, stderr io.Writer) int {
	cmd := newRedisCommand("ls", lsUsage, "the Clients' namespace (WithNamespace)", stderr)
	redisURL, namespace := cmd.redisURL, cmd.namespace
	asJSON := cmd.fs.Bool("json", false, "print a JSON array")
	rest, code, ok := cmd.parse(args)
	if !ok {
		return code
	}
	if len(rest) > 0 {
		return usageError(stderr, "ls", "unexpected argument %q (flags only)", rest[0])
	}
	conn, code := connect(stderr, "ls", *redisURL)
	if conn == nil {
		return code
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	locks, err := lockscan.List(ctx, conn.rdb, conn.backend, *namespace)
	if err != nil {
		fmt.Fprintln(stderr, exitcode.Message("fencelock ls", err))
		return exitcode.CouldNotRun
	}
	if *asJSON {
		err = writeLocksJSON(stdout, locks)
	} else {
		err = writeLocksTable(stdout, *namespace, locks)
	}
	if err != nil {
		fmt.Fprintln(stderr, exitcode.Message("fencelock ls", err))
		return exitcode.CouldNotRun
	}
	return exitcode.OK
}

// writeLocksTable prints locks as ls's table, or a line saying there are
// none.
func writeLocksTable(w io.Writer, namespace string, locks []lockscan.Lock) error {
	if len(locks) == 0 {
		_, err := fmt.Fprintf(w, "no locks held in namespace %q\n", namespace)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTOKEN\tOWNER\tIDENTITY\tFENCE\tTTL\tHOLDS\tWAITERS")
	for _, l := range locks {
		token := "-"
		if len(l.Tokens) > 0 {
			token = shorten(l.Tokens[0])
		}
		// Without WithOwner the owner is the token: say it once.
		owner := l.Owner
		if len(l.Tokens) > 0 && owner == l.Tokens[0] {
			owner = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%v\t%d\t%d\n",
			l.Name, token, orDash(owner), orDash(l.Identity), l.Fence, roundTTL(l.TTL), l.Holds, l.Waiters)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// lockJSON is one lock in ls's and watch's JSON.
type lockJSON struct {
	Key       string   `json:"key"`
	Namespace string   `json:"namespace"`
	LockKey   string   `json:"lock_key"`
	Owner     string   `json:"owner"`
	Tokens    []string `json:"tokens"`
	Identity  string   `json:"identity,omitempty"`
	Fence     int64    `json:"fence"`
	TTLMillis int64    `json:"ttl_ms"`
	Holds     int      `json:"holds"`
	Waiters   int64    `json:"waiters"`
}

func writeLocksJSON(w io.Writer, locks []lockscan.Lock) error {
	out := make([]lockJSON, 0, len(locks))
	for _, l := range locks {
		out = append(out, lockJSON{l.Name, l.Namespace, l.LockKey, l.Owner, l.Tokens, l.Identity,
			l.Fence, l.TTL.Milliseconds(), l.Holds, l.Waiters})
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// adminConn is a connection to Redis for the admin commands.
type adminConn struct {
	rdb     redis.UniversalClient
	backend *redisbackend.Backend
}

func (c *adminConn) Close() {
	c.backend.Close()
	c.rdb.Close()
}

// connect dials Redis (--redis, else $REDIS_URL, else 127.0.0.1:6379) for
// command cmd. On failure it prints the error and returns nil and the exit
// status: a URL that is no URL is a usage error, a Redis that does not
// answer (or refuses the credentials: exitcode.Refused) is not.
func connect(stderr io.Writer, cmd, redisURL string) (*adminConn, int) {
	if redisURL == "" {
		redisURL = os.Getenv("REDIS_URL")
	}
	rdb, err := dialRedis(redisURL)
	if err != nil {
		var urlErr *badURLError
		if errors.As(err, &urlErr) {
			return nil, usageError(stderr, cmd, "%v", err)
		}
		fmt.Fprintln(stderr, exitcode.Message("fencelock "+cmd, err))
		return nil, couldNotRunCode(err)
	}
	// Notifications off: these commands wait for no lock.
	return &adminConn{rdb: rdb, backend: redisbackend.New(rdb, redisbackend.WithoutReleaseNotifications())}, exitcode.OK
}

// usageError prints a usage error of command cmd and a pointer to its -h,
// and returns the exit status of a command that could not run.
func usageError(stderr io.Writer, cmd, format string, a ...any) int {
	fmt.Fprintf(stderr, "fencelock "+cmd+": "+format+"\n", a...)
	fmt.Fprintf(stderr, "Run \"fencelock %s -h\" for usage.\n", cmd)
	return exitcode.CouldNotRun
}
