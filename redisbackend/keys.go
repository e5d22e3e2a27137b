package redisbackend

import (
	"strings"

	"github.com/fencelock/fencelock/driver"
)

// Key layout. For a lock named KEY in namespace NS (fencelock.WithNamespace,
// default "lock"):
//
//	NS:{KEY}:lock           hash, expiring with its longest lease (PX):
//	                          owner  the holder (WithOwner, or the owner token)
//	                          fence  the holder's fencing token
//	                          id     the holder's identity (fencelock.
//	                                 WithIdentity), only when it gave one
//	                          t:TOK  one field per hold, named by its owner
//	                                 token: the server time (Unix ms) at which
//	                                 the hold's lease ends
//	                          waited set when an acquire found the lock held:
//	                                 the release that frees the lock publishes
//	                                 on the channel only then, and hands the
//	                                 lock to the releasing Client's next
//	                                 waiter only without it (or during its
//	                                 process's turn, below)
//	                          p:ID   one field per process waiting in line
//	                                 (lua/turns.lua): ID is its
//	                                 notifier's, the value the server time
//	                                 (Unix µs) it got in line; a release that
//	                                 frees the lock keeps these (the key then
//	                                 expires after turnKeepMs)
//	                          streak holds its holder's process has handed
//	                                 on to its own waiters in a row during
//	                                 its turn
//	                          woken, wokenUntil  the process (p:ID) the last
//	                                 release woke for its turn, and until
//	                                 when (Unix µs) the others in line leave
//	                                 the free lock to it
//	NS:{KEY}:fence          string, no expiry unless WithFenceCounterExpiry:
//	                        the last fencing token minted
//	NS:{KEY}:tombstone:TOK  string, expiring: acquires with token TOK are
//	                        refused (its client gave up an acquire whose
//	                        reply was lost; a late copy must not take the lock)
//	NS:{KEY}:queue          sorted set, the line of fair waiters
//	                        (fencelock.WithFairness): member = the waiter's
//	                        token, score = its arrival number
//	NS:{KEY}:queue:ends     hash: for each waiter in the line, the server
//	                        time (Unix ms) at which its place lapses unless
//	                        renewed; field "g:TOKEN" = what a release needs
//	                        to grant that waiter the lock (JSON, see
//	                        lua/grant.lua); field "#seq" = the last arrival
//	                        number. Both outlive the longest place: a join
//	                        that finds them ending within its place sets
//	                        them to end two places from now.
//	NS:{KEY}:tick           hash, expiring with the record's life: the
//	                        record of a job's last claimed tick
//	                        (driver.Ticker, jobtick.go), for the
//	                        lock of a job (KEY is "job:" + its name):
//	                          tick   the tick (its UTC time, fixed width)
//	                          token  the token of the run that claimed it
//	                          ptick, ptoken  the claim it replaced, put
//	                                 back if this one is undone
//	NS:{KEY}:released       pub/sub channel: a message when the lock is freed
//	                        ("released"), when a fair waiter's turn has come
//	                        ("next:TOKEN"), or when a release granted the
//	                        lock to a fair waiter without a grant channel
//	                        ("grant:TOKEN:FENCE:ATTEMPT")
//	NS:grants:RANDOM        pub/sub channel of one Backend for its fair
//	                        waiters of the namespace (notifier.grantChannel):
//	                        a release granted the lock to one of them
//	                        ("grant:TOKEN:FENCE:ATTEMPT")
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
		return &driver.InvalidArgumentError{Name: "namespace", Value: namespace,
			Reason: "must not contain '{' or '}' with the Redis backend (they delimit the Cluster hash tag)"}
	}
	if strings.HasPrefix(key, "}") {
		return &driver.InvalidArgumentError{Name: "key", Value: key,
			Reason: "must not begin with '}' with the Redis backend (the Cluster hash tag would be empty)"}
	}
	return nil
}

// lockKeys are the names one lock uses.
type lockKeys struct {
	base, lock, fence, channel string
}

// lockKeyOf is keysFor(namespace, key).lock without the other names: the
// renewal of every held lock needs only this one, and a sweep of 100,000
// locks would otherwise make 300,000 strings for nothing.
func lockKeyOf(namespace, key string) string {
	if namespace == "" {
		return "{" + key + "}:lock"
	}
	return namespace + ":{" + key + "}:lock"
}

// lockKeyOfChannel returns the lock key whose release channel is channel
// (keysFor's channel), and false for a channel of another kind.
func lockKeyOfChannel(channel string) (string, bool) {
	base, ok := strings.CutSuffix(channel, ":released")
	return base + ":lock", ok
}

// keysFor returns the names of the lock key in namespace. They are slices
// of one string, made with one allocation: every acquire and release makes
// them.
func keysFor(namespace, key string) lockKeys {
	const lock, fence, channel = ":lock", ":fence", ":released"
	n := len(key) + 2 // {key}
	if namespace != "" {
		n += len(namespace) + 1
	}
	var b strings.Builder
	b.Grow(3*n + len(lock) + len(fence) + len(channel))
	for _, suffix := range [...]string{lock, fence, channel} {
		if namespace != "" {
			b.WriteString(namespace)
			b.WriteByte(':')
		}
		b.WriteByte('{')
		b.WriteString(key)
		b.WriteByte('}')
		b.WriteString(suffix)
	}
	all := b.String()
	lockEnd := n + len(lock)
	fenceEnd := lockEnd + n + len(fence)
	return lockKeys{
		base:    all[:n],
		lock:    all[:lockEnd],
		fence:   all[lockEnd:fenceEnd],
		channel: all[fenceEnd:],
	}
}

// tombstone is the name of the tombstone of token.
func (k lockKeys) tombstone(token string) string {
	return k.base + ":tombstone:" + token
}

// tick is the name of the record of the job's last claimed tick
// (jobtick.go).
func (k lockKeys) tick() string { return k.base + ":tick" }

// queue and queueEnds are the line of fair waiters (fair.go).
func (k lockKeys) queue() string     { return k.base + ":queue" }
func (k lockKeys) queueEnds() string { return k.base + ":queue:ends" }

// releaseKeys are the KEYS of the release script for token.
// The three names it adds are slices of one string, as in keysFor.
func (k lockKeys) releaseKeys(token string) []string {
	const tombstone, queue, queueEnds = ":tombstone:", ":queue", ":queue:ends"
	var b strings.Builder
	b.Grow(3*len(k.base) + len(tombstone) + len(token) + len(queue) + len(queueEnds))
	b.WriteString(k.base)
	b.WriteString(tombstone)
	b.WriteString(token)
	tombstoneEnd := b.Len()
	b.WriteString(k.base)
	b.WriteString(queue)
	queueEnd := b.Len()
	b.WriteString(k.base)
	b.WriteString(queueEnds)
	all := b.String()
	return []string{k.lock, all[:tombstoneEnd], all[tombstoneEnd:queueEnd], all[queueEnd:], k.fence}
}
