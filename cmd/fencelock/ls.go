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

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/cmd/internal/exitcode"
	"github.com/fencelock/fencelock/cmd/internal/lockscan"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

const lsUsage = `Usage: fencelock ls [flags]

Lists what is held in a namespace, one line each: a plain lock, and each
permit of a semaphore and each read or write hold of a read-write lock.
A line has the name, the kind (lock, permit, read, write), the owner token
of the hold (the first, when a lock's owner re-entered it), the lock's
owner when it was taken WithOwner, the holder's identity when its Client
gave one (fencelock.WithIdentity: host:pid, a pod name), the fence, the
lease left (the server's PTTL), the holds, and how many Clients wait
(subscribers of the release channel of the lock, the semaphore or the
read-write lock; on a Cluster, those connected to the node that answered).
It changes nothing. Keys are found with SCAN, on every master of a
Cluster, so it does not block Redis as KEYS would.

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
		err = writeLocksJSON(stdout, rowsOf(locks))
	} else {
		err = writeLocksTable(stdout, *namespace, rowsOf(locks))
	}
	if err != nil {
		fmt.Fprintln(stderr, exitcode.Message("fencelock ls", err))
		return exitcode.CouldNotRun
	}
	return exitcode.OK
}

// row is one line of ls and watch: a plain lock, or one hold of another
// kind.
type row struct {
	name, namespace, kind string
	redisKey              string   // the key that keeps the hold
	tokens                []string // the holds' owner tokens (a lock's, sorted)
	owner, identity       string   // owner: "" for a hold that is not a lock's
	fence                 int64
	ttl                   time.Duration
	holds                 int
	waiters               int64
}

// rowsOf makes the lines of locks: each name's plain lock, then its other
// holds (by kind, then fence).
func rowsOf(locks []lockscan.Lock) []row {
	var rows []row
	for _, l := range locks {
		if l.Held {
			tokens := make([]string, 0, len(l.Holds))
			for _, h := range l.Holds {
				tokens = append(tokens, h.Token)
			}
			rows = append(rows, row{l.Name, l.Namespace, "lock", l.LockKey, tokens, l.Owner, l.Identity,
				l.Fence, l.TTL, len(l.Holds), l.Waiters})
		}
		for _, h := range l.Others {
			key, waiters := l.RW.Key, l.RW.Waiters
			if h.Kind == fencelock.KindSemaphore {
				key, waiters = l.Semaphore.Key, l.Semaphore.Waiters
			}
			rows = append(rows, row{l.Name, l.Namespace, kindName(h.Kind), key, []string{h.Token}, "", "",
				h.Fence, h.TTL, 1, waiters})
		}
	}
	return rows
}

// writeLocksTable prints rows as ls's table, or a line saying there are
// none.
func writeLocksTable(w io.Writer, namespace string, rows []row) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintf(w, "no locks held in namespace %q\n", namespace)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tKIND\tTOKEN\tOWNER\tIDENTITY\tFENCE\tTTL\tHOLDS\tWAITERS")
	for _, r := range rows {
		token := "-"
		if len(r.tokens) > 0 {
			token = shorten(r.tokens[0])
		}
		// Without WithOwner the owner is the token: say it once.
		owner := r.owner
		if len(r.tokens) > 0 && owner == r.tokens[0] {
			owner = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%v\t%d\t%d\n",
			r.name, r.kind, token, orDash(owner), orDash(r.identity), r.fence, roundTTL(r.ttl), r.holds, r.waiters)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// lockJSON is one line of ls's and watch's JSON.
type lockJSON struct {
	Key       string   `json:"key"`
	Kind      string   `json:"kind"` // "lock", "permit", "read" or "write"
	Namespace string   `json:"namespace"`
	LockKey   string   `json:"lock_key"` // the Redis key that keeps the hold
	Owner     string   `json:"owner"`    // a lock's; a permit's or read-write hold's is its token
	Tokens    []string `json:"tokens"`
	Identity  string   `json:"identity,omitempty"`
	Fence     int64    `json:"fence"`
	TTLMillis int64    `json:"ttl_ms"`
	Holds     int      `json:"holds"`
	Waiters   int64    `json:"waiters"`
}

func writeLocksJSON(w io.Writer, rows []row) error {
	out := make([]lockJSON, 0, len(rows))
	for _, r := range rows {
		owner := r.owner
		if owner == "" && len(r.tokens) == 1 {
			owner = r.tokens[0]
		}
		out = append(out, lockJSON{r.name, r.kind, r.namespace, r.redisKey, owner, r.tokens, r.identity,
			r.fence, r.ttl.Milliseconds(), r.holds, r.waiters})
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
