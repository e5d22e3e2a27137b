// Package lockscan lists the locks of a namespace held in Redis, for the
// fencelock command's ls and watch (and anything else that shows many
// locks at once): a SCAN of the namespace's lock keys on every master,
// then redisbackend's Inspect of each.
package lockscan

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// Pattern is the SCAN MATCH pattern of the lock keys of namespace (see
// redisbackend's key layout: NS:{KEY}:lock, or {KEY}:lock without a
// namespace).
func Pattern(namespace string) string {
	if namespace == "" {
		return "{*}:lock"
	}
	return globEscape(namespace) + ":{*}:lock"
}

// globEscape escapes the characters Redis's MATCH gives a meaning to.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// SplitLockKey splits a lock's Redis key into its namespace and the lock's
// name: "lock:{orders:42}:lock" is namespace "lock", name "orders:42";
// "{orders}:lock" has the empty namespace. ok is false for anything else.
// A namespace never contains a brace (redisbackend refuses it), so the
// first '{' starts the name, and the name ends at the final "}:lock".
func SplitLockKey(redisKey string) (namespace, name string, ok bool) {
	i := strings.IndexByte(redisKey, '{')
	if i < 0 || !strings.HasSuffix(redisKey, "}:lock") || len(redisKey)-len("}:lock") <= i+1 {
		return "", "", false
	}
	name = redisKey[i+1 : len(redisKey)-len("}:lock")]
	switch prefix := redisKey[:i]; {
	case prefix == "":
		return "", name, true
	case strings.HasSuffix(prefix, ":") && len(prefix) > 1:
		return prefix[:len(prefix)-1], name, true
	}
	return "", "", false
}

// Names returns the names of the locks of namespace that have a key in
// rdb, sorted. On a Cluster it scans every master (a plain SCAN would see
// one node's keys only). A lock whose lease ended while the scan ran may
// be in the list; Inspect then reports it free.
//
// A namespace with a brace is refused (an error matching
// fencelock.ErrInvalidArgument), as redisbackend refuses it: no lock can
// be in it, and an empty list would hide the mistake.
func Names(ctx context.Context, rdb redis.UniversalClient, namespace string) ([]string, error) {
	if strings.ContainsAny(namespace, "{}") {
		return nil, &fencelock.InvalidArgumentError{Name: "namespace", Value: namespace,
			Reason: "must not contain '{' or '}' with the Redis backend (they delimit the Cluster hash tag)"}
	}
	pattern := Pattern(namespace)
	var (
		mu    sync.Mutex
		names []string
	)
	scan := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			ns, name, ok := SplitLockKey(it.Val())
			// MATCH is anchored and the namespace has no brace, so
			// the split always agrees; checked all the same, since
			// a key outside the layout must not be inspected.
			if ok && ns == namespace {
				mu.Lock()
				names = append(names, name)
				mu.Unlock()
			}
		}
		return it.Err()
	}
	var err error
	if cc, isCluster := rdb.(*redis.ClusterClient); isCluster {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("scanning %s: %w", pattern, err)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// List returns the held locks of namespace, sorted by name: Names, then
// one Inspect (a pipelined round trip) per lock. Locks found free by
// their Inspect are left out.
func List(ctx context.Context, rdb redis.UniversalClient, b *redisbackend.Backend, namespace string) ([]Lock, error) {
	names, err := Names(ctx, rdb, namespace)
	if err != nil {
		return nil, err
	}
	locks := make([]Lock, 0, len(names))
	for _, name := range names {
		info, err := b.Inspect(ctx, namespace, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if info.Held {
			locks = append(locks, Lock{Name: name, Namespace: namespace, LockInfo: info})
		}
	}
	return locks, nil
}

// Lock is one held lock.
type Lock struct {
	Name      string // the lock's name, as the Client's user gave it
	Namespace string
	redisbackend.LockInfo
}
