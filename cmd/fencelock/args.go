package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/cmd/internal/exitcode"
	"github.com/fencelock/fencelock/cmd/internal/lockscan"
)

// parseInterleaved parses fs's flags wherever they stand among args, so that
// "inspect KEY --json" works like "inspect --json KEY" (the flag package
// stops at the first argument that is not a flag). Arguments after "--" are
// never flags. It returns the other arguments, in order.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if consumed := len(args) - len(left); consumed > 0 && args[consumed-1] == "--" {
			return append(rest, left...), nil
		}
		if len(left) == 0 {
			return rest, nil
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

// lockArg resolves a KEY argument: a full Redis key that keeps holds
// ("lock:{orders}:lock", "lock:{partner-api}:sem", "lock:{doc}:rw", as ls
// prints and redis-cli shows them) names its namespace, name and kinds;
// another key of the layout (a fence counter, a semaphore's info hash) is
// refused, never taken for a name; anything else is a name in namespace,
// of every kind (kinds nil). A full key whose namespace differs from a
// --namespace given explicitly is refused rather than guessed.
func lockArg(arg, namespace string, namespaceSet bool) (ns, name string, kinds []fencelock.Kind, err error) {
	if k, ok := lockscan.SplitKey(arg); ok {
		if namespaceSet && k.Namespace != namespace {
			return "", "", nil, fmt.Errorf("key %q is in namespace %q, not --namespace %q (give the lock's name, or drop --namespace)", arg, k.Namespace, namespace)
		}
		return k.Namespace, k.Name, k.Kinds, nil
	}
	if lockscan.LooksLikeKey(arg) {
		return "", "", nil, fmt.Errorf("%q is a Redis key that keeps no holds: give the name, or the key of its lock (NS:{NAME}:lock), semaphore (NS:{NAME}:sem) or read-write lock (NS:{NAME}:rw)", arg)
	}
	return namespace, arg, nil, nil
}

// kindName is how the commands name a kind of hold.
func kindName(k fencelock.Kind) string {
	if k == fencelock.KindSemaphore {
		return "permit"
	}
	return k.String()
}

// wants reports whether kinds (nil: every kind) has k.
func wants(kinds []fencelock.Kind, k fencelock.Kind) bool {
	return kinds == nil || slices.Contains(kinds, k)
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// roundTTL shows a lease to a tenth of a second, or to the millisecond
// under a second, which is as precise as a lease read over the network is.
func roundTTL(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

// redisFlagHelp is the help of --redis, the same for every command that
// talks to Redis.
const redisFlagHelp = "Redis URL, host:port, or comma-separated Cluster addresses (default $REDIS_URL, else 127.0.0.1:6379)"

// redisCommand is the flag set of a command that talks to Redis, with the
// two flags they all take: --redis and --namespace. The command adds its
// own flags to fs before parse.
type redisCommand struct {
	fs        *flag.FlagSet
	redisURL  *string
	namespace *string
}

// newRedisCommand makes the flag set of "fencelock name", printing usage
// and the flags for -h, and errors, on stderr.
func newRedisCommand(name, usage, namespaceHelp string, stderr io.Writer) redisCommand {
	fs := flag.NewFlagSet("fencelock "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := redisCommand{
		fs:        fs,
		redisURL:  fs.String("redis", "", redisFlagHelp),
		namespace: fs.String("namespace", fencelock.DefaultNamespace, namespaceHelp),
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		printFlags(stderr, fs)
	}
	return c
}

// parse parses args, flags and arguments in any order (parseInterleaved),
// and returns the arguments. When ok is false the command ends with code:
// exitcode.OK after -h, exitcode.CouldNotRun after a bad flag (the flag
// package has said what was wrong).
func (c redisCommand) parse(args []string) (rest []string, code int, ok bool) {
	rest, err := parseInterleaved(c.fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil, exitcode.OK, false
	case err != nil:
		return nil, exitcode.CouldNotRun, false
	}
	return rest, 0, true
}
