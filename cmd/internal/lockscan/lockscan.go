// Package lockscan lists what is held in a namespace in Redis, for the
// fencelock command's ls and watch and the dashboard (anything that shows
// many locks at once): a SCAN of the namespace's keys that keep holds
// (plain locks, semaphores, read-write locks) on every master, then
// redisbackend's Inspect of each name.
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

// Pattern is the SCAN MATCH pattern of the keys of namespace that keep
// holds (see redisbackend's key layout): NS:{NAME}:lock (the plain lock),
// NS:{NAME}:sem (a semaphore's permits) and NS:{NAME}:rw (a read-write
// lock's holds), or the same without "NS:" for the empty namespace. A glob
// has no alternation, so it asks for the keys that end in one of the three
// suffixes' last letters: the fence counters (which never expire) and the
// other keys of a name end otherwise, so one SCAN finds them all and
// little else; SplitKey sorts out the rest (a tombstone whose token ends
// so).
func Pattern(namespace string) string {
	return NamespacePattern(namespace) + "{*}:*[kmw]"
}

// ChannelPattern is the PSUBSCRIBE pattern of the release channels of
// namespace: NS:{NAME}:released, NS:{NAME}:sem:released and
// NS:{NAME}:rw:released.
func ChannelPattern(namespace string) string {
	return NamespacePattern(namespace) + "{*}:*released"
}

// NamespacePattern is the start of every pattern of namespace's keys and
// channels: the namespace, escaped for a glob, and ':' ("" for the empty
// namespace).
func NamespacePattern(namespace string) string {
	if namespace == "" {
		return ""
	}
	return globEscape(namespace) + ":"
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

// Key is a Redis key that keeps holds, split: the namespace and name it
// belongs to, and the kinds of hold it keeps.
type Key struct {
	Namespace, Name string
	// Kinds are KindLock for NS:{NAME}:lock, KindSemaphore for
	// NS:{NAME}:sem, KindRead and KindWrite for NS:{NAME}:rw.
	Kinds []fencelock.Kind
}

// The suffixes of the keys that keep holds, and the kinds they keep.
var suffixes = []struct {
	suffix string
	kinds  []fencelock.Kind
}{
	{"}:lock", []fencelock.Kind{fencelock.KindLock}},
	{"}:sem", []fencelock.Kind{fencelock.KindSemaphore}},
	{"}:rw", []fencelock.Kind{fencelock.KindRead, fencelock.KindWrite}},
}

// SplitKey splits a Redis key that keeps holds into its namespace, name
// and kinds: "lock:{orders:42}:lock" is the plain lock "orders:42" of
// namespace "lock"; "lock:{partner-api}:sem" the semaphore "partner-api";
// "{doc}:rw" the read-write lock "doc" of the empty namespace. ok is false
// for anything else, such as a fence counter or a lock's name. A namespace
// never contains a brace (redisbackend refuses it), so the first '{'
// starts the name, and the name ends at the final suffix.
func SplitKey(redisKey string) (k Key, ok bool) {
	i := strings.IndexByte(redisKey, '{')
	if i < 0 {
		return Key{}, false
	}
	for _, s := range suffixes {
		name, found := strings.CutSuffix(redisKey[i+1:], s.suffix)
		if !found || name == "" {
			continue
		}
		switch prefix := redisKey[:i]; {
		case prefix == "":
			return Key{"", name, s.kinds}, true
		case strings.HasSuffix(prefix, ":") && len(prefix) > 1:
			return Key{prefix[:len(prefix)-1], name, s.kinds}, true
		}
		return Key{}, false
	}
	return Key{}, false
}

// LooksLikeKey reports whether s has the shape of a Redis key of the
// layout, NS:{NAME}:SUFFIX or {NAME}:SUFFIX, whatever the suffix: a key a
// person copied from redis-cli, to be recognised by SplitKey or refused,
// never taken for a lock's name.
func LooksLikeKey(s string) bool {
	i := strings.IndexByte(s, '{')
	if i < 0 || (i > 0 && (i == 1 || s[i-1] != ':')) {
		return false
	}
	j := strings.LastIndex(s, "}:")
	return j > i+1 && j+2 < len(s)
}

// Names returns the names of namespace that have a key keeping holds in
// rdb (a plain lock, a semaphore or a read-write lock), sorted, each
// once. On a Cluster it scans every master (a plain SCAN would see one
// node's keys only). A name whose leases ended while the scan ran may be
// in the list; Inspect then reports nothing held.
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
			// MATCH is anchored and the namespace has no brace, so the
			// namespace always agrees; checked all the same, since a key
			// outside the layout must not be inspected.
			if k, ok := SplitKey(it.Val()); ok && k.Namespace == namespace {
				mu.Lock()
				names = append(names, k.Name)
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

// List returns the names of namespace with a live hold of any kind, sorted
// by name: Names, then one Inspect (a pipelined round trip) per name.
// Names found with nothing held by their Inspect are left out.
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
		if info.AnyHeld() {
			locks = append(locks, Lock{Name: name, Namespace: namespace, Inspection: info})
		}
	}
	return locks, nil
}

// Lock is one name with a live hold: its plain lock, its semaphore's
// permits or its read-write lock's holds (Inspection.Others).
type Lock struct {
	Name      string // the name, as the Client's user gave it
	Namespace string
	redisbackend.Inspection
}
