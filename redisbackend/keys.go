package redisbackend

import (
	"strings"

	"github.com/fencelock/fencelock"
)

// Key layout. For a lock named KEY in namespace NS (fencelock.WithNamespace,
// default "lock"):
//
//	NS:{KEY}:lock      hash, with the lease as its expiry (PX):
//	                     owner  the holder (WithOwner, or the owner token)
//	                     fence  the holder's fencing token
//	                     holds  the hold count (re-entry adds one)
//	                     t:TOK  one field per hold, named by its owner token
//	NS:{KEY}:fence     string, no expiry: the last fencing token minted
//	NS:{KEY}:released  pub/sub channel: a message when the lock is freed
//
// The braces are a Redis Cluster hash tag: the lock's keys live in one slot,
// so each script touches one node. With an empty namespace the keys start at
// the brace. Inspect a lock with:
//
//	redis-cli HGETALL 'lock:{orders:42}:lock'
//	redis-cli PTTL    'lock:{orders:42}:lock'
//	redis-cli GET     'lock:{orders:42}:fence'

// checkNames refuses names that would break the hash tag: a namespace with a
// brace (it would start or end the tag early) and a key starting with '}'
// (the tag would be empty, so Redis would hash each full name on its own,
// and Cluster would refuse the scripts with CROSSSLOT).
func checkNames(namespace, key string) error {
	if strings.ContainsAny(namespace, "{}") {
		return &fencelock.InvalidArgumentError{Name: "namespace", Value: namespace,
			Reason: "must not contain '{' or '}' with the Redis backend (they delimit the Cluster hash tag)"}
	}
	if strings.HasPrefix(key, "}") {
		return &fencelock.InvalidArgumentError{Name: "key", Value: key,
			Reason: "must not begin with '}' with the Redis backend (the Cluster hash tag would be empty)"}
	}
	return nil
}

// lockKeys are the names one lock uses.
type lockKeys struct {
	lock, fence, channel string
}

func keysFor(namespace, key string) lockKeys {
	base := "{" + key + "}"
	if namespace != "" {
		base = namespace + ":" + base
	}
	return lockKeys{
		lock:    base + ":lock",
		fence:   base + ":fence",
		channel: base + ":released",
	}
}
