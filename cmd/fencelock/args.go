package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/internal/lockscan"
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

// lockArg resolves a KEY argument: a lock's full Redis key
// ("lock:{orders}:lock", as ls prints and redis-cli shows) names its
// namespace and lock; anything else is a lock name in namespace. A full key
// whose namespace differs from a --namespace given explicitly is refused
// rather than guessed.
func lockArg(arg, namespace string, namespaceSet bool) (ns, name string, err error) {
	if ns, name, ok := lockscan.SplitLockKey(arg); ok {
		if namespaceSet && ns != namespace {
			return "", "", fmt.Errorf("key %q is in namespace %q, not --namespace %q (give the lock's name, or drop --namespace)", arg, ns, namespace)
		}
		return ns, name, nil
	}
	return namespace, arg, nil
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
