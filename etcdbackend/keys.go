package etcdbackend

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fencelock/fencelock/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The keys of one lock share the prefix P = esc(namespace) "/" esc(key) "/",
// where esc escapes "%" and "/" so that neither part contains a slash: no
// lock's prefix is a prefix of another's, and a range over one lock's keys
// never reaches another lock.
//
//	P "h/" token   a hold: value = its owner; attached to the hold's own
//	               lease, so it vanishes when that lease ends
//	P "t/" token   a tombstone (ReleaseRequest.Tombstone): attached to a
//	               lease of its own; while it exists, acquires with token
//	               are refused
//	P "tick"       the record of a job's last claimed tick (jobtick.go):
//	               value = the tick, a NUL byte, the claiming token;
//	               attached to a lease of its own, the record's life
//	P "last"       the fence record, never deleted: its value is the base
//	               (20 zero-padded decimal digits, usually 0) and its
//	               ModRevision the revision of the last fresh acquisition;
//	               the fence of that acquisition is base + ModRevision
//
// The holds of a lock all have the same owner (others are refused), so the
// owner of a held lock is the value of any of its holds.
type keys struct {
	prefix string
	holds  string // P "h/": the range of every hold
	last   string
	tick   string
}

func keysOf(namespace, key string) keys {
	p := escape(namespace) + "/" + escape(key) + "/"
	return keys{prefix: p, holds: p + "h/", last: p + "last", tick: p + "tick"}
}

func (k keys) hold(token string) string      { return k.holds + token }
func (k keys) tombstone(token string) string { return k.prefix + "t/" + token }

// holdsEnd is the end of the range of every hold (exclusive).
func (k keys) holdsEnd() string { return clientv3.GetPrefixRangeEnd(k.holds) }

var escaper = strings.NewReplacer("%", "%25", "/", "%2F")

func escape(s string) string { return escaper.Replace(s) }

// checkRef refuses the names etcd cannot store: an empty key or token.
// (Any bytes are fine in an etcd key, so no other name is refused.)
func checkRef(ref driver.Ref) error {
	switch {
	case ref.Key == "":
		return &driver.InvalidArgumentError{Name: "key", Value: ref.Key, Reason: "must not be empty"}
	case ref.Token == "":
		return &driver.InvalidArgumentError{Name: "token", Value: ref.Token, Reason: "must not be empty"}
	}
	return nil
}

// padBase writes a fence base so that etcd's byte-wise comparison of
// values orders bases by number.
func padBase(base int64) string { return fmt.Sprintf("%020d", base) }

// parseBase reads a fence base written by padBase (0 for none).
func parseBase(v []byte) (int64, error) {
	if len(v) == 0 {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("etcdbackend: fence record holds %q, not a base", v)
	}
	return n, nil
}
