package fencelock

import (
	"fmt"
	"os"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// MaxIdentityLen is the longest identity WithIdentity accepts, in bytes.
const MaxIdentityLen = 256

// WithIdentity makes the Client store identity with every lock it takes,
// for operators: "fencelock ls" and "fencelock inspect", the dashboard and
// Client.Inspect (LockInfo.Identity) show who holds a lock, where the owner
// token says nothing. DefaultIdentity gives host:pid; any short text works
// ("billing-7 pid 4242", a pod name). It is informational only: it plays no
// part in ownership (that is WithOwner's) or fencing.
//
// The identity is recorded by the acquisition that takes a free lock; a
// re-entry keeps the first one. The Redis backend stores it in the lock's
// hash (field id) within the acquire script, and only when it is set, so a
// Client without it sends and stores nothing more. Backends that do not
// record it ignore it; acquisitions made through the line of fair waiters
// (WithFairness), semaphore permits and read/write holds do not record it.
//
// identity must be valid UTF-8 of at most MaxIdentityLen bytes without
// control characters (it is printed in tables and log lines); otherwise
// Check and every acquire fail with an error matching ErrInvalidArgument.
// An empty identity stores nothing.
func WithIdentity(identity string) Option {
	return func(c *clientConfig) {
		c.identity, c.identityErr = identity, checkIdentity(identity)
	}
}

// DefaultIdentity returns "host:pid", this process's host name and process
// id, for WithIdentity: enough for an operator to find the holder of a
// stuck lock. The host is "unknown-host" when the system does not say.
func DefaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// checkIdentity refuses an identity that cannot be shown on one line.
func checkIdentity(identity string) error {
	switch {
	case len(identity) > MaxIdentityLen:
		return invalid("WithIdentity identity", identity, fmt.Sprintf("must be at most %d bytes, is %d", MaxIdentityLen, len(identity)))
	case !utf8.ValidString(identity):
		return invalid("WithIdentity identity", identity, "must be valid UTF-8")
	}
	for _, r := range identity {
		if unicode.IsControl(r) {
			return invalid("WithIdentity identity", identity, fmt.Sprintf("must not contain control characters (%U)", r))
		}
	}
	return nil
}
