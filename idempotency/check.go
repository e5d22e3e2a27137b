package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/fencelock/fencelock"
)

// ErrInvalidArgument is matched by every error that reports a bad argument
// (an empty, overlong or unstorable scope or request key, a nil operation,
// a bad table name or option). Such errors also match
// fencelock.ErrInvalidArgument, so one check covers both packages.
var ErrInvalidArgument error = invalidArgument{}

// invalidArgument is ErrInvalidArgument: its own message, and a match for
// fencelock.ErrInvalidArgument.
type invalidArgument struct{}

func (invalidArgument) Error() string        { return "idempotency: invalid argument" }
func (invalidArgument) Is(target error) bool { return target == fencelock.ErrInvalidArgument }

// ErrPayloadMismatch is returned when a request key arrives again with a
// payload whose fingerprint (WithFingerprint) differs from the one the key
// was first used with. The key names one request: replaying the first
// request's response would tell the client that its different request was
// done. An HTTP API answers 422 ("use a new key for a new request").
var ErrPayloadMismatch = errors.New("idempotency: request key reused with a different payload")

// MaxKeyLen is the longest scope and the longest request key accepted, in
// bytes. Keys are stored in a primary key (B-tree entries on PostgreSQL are
// limited to about 2.7 kB) and become part of a Redis lock key, so they are
// kept short; 256 bytes is ample for a UUID, a client's request number or
// a hash.
const MaxKeyLen = 256

// argError is a bad argument, named with its value. It matches
// ErrInvalidArgument (and so fencelock.ErrInvalidArgument).
type argError struct {
	name   string // "request key", "scope", "table name", ...
	value  string // already quoted or formatted
	reason string
}

func (e *argError) Error() string {
	return fmt.Sprintf("idempotency: invalid %s %s: %s", e.name, e.value, e.reason)
}

func (e *argError) Unwrap() error { return ErrInvalidArgument }

func invalid(name string, value any, reason string) error {
	v := fmt.Sprint(value)
	switch value := value.(type) {
	case nil:
		v = "nil"
	case string:
		v = fmt.Sprintf("%q", value)
	}
	return &argError{name: name, value: v, reason: reason}
}

// checkKey reports why s cannot be a scope or request key, or nil. The
// rules are those of the places a key goes: PostgreSQL's TEXT cannot hold
// a NUL byte nor invalid UTF-8 (SQLite would take both, so a service
// moving between them would change behaviour), and MaxKeyLen bounds the
// index entry and the Redis key.
func checkKey(name, s string) error {
	switch {
	case s == "":
		return invalid(name, s, "must not be empty")
	case len(s) > MaxKeyLen:
		// The value itself is not quoted: it may be huge.
		return &argError{name: name, value: fmt.Sprintf("of %d bytes", len(s)),
			reason: fmt.Sprintf("at most %d bytes (idempotency.MaxKeyLen)", MaxKeyLen)}
	case !utf8.ValidString(s):
		return invalid(name, s, "not valid UTF-8 (PostgreSQL cannot store it)")
	case strings.IndexByte(s, 0) >= 0:
		return invalid(name, s, "contains a NUL byte (PostgreSQL cannot store it)")
	}
	return nil
}

// DoOption configures one call of Guard.Do.
type DoOption func(*call)

// call is the configuration of one Do.
type call struct {
	fingerprint string // hex SHA-256 of the payload; "" without WithFingerprint
}

// WithFingerprint binds the request key to payload, the request's content
// in a canonical form (for example the JSON body as the client sent it, or
// the fields that define the request, in a fixed order). The record keeps
// the payload's SHA-256, not the payload. A later Do with the same scope
// and key but a different payload fails with ErrPayloadMismatch instead of
// replaying the first response, whatever state the first request is in
// (done, failed, or in progress). The rule holds until the record is
// purged (Store.Purge).
//
// A record written without a fingerprint (by a Do without this option, or
// before the column existed) matches any payload, and a Do without this
// option matches any record: the check needs both sides.
func WithFingerprint(payload []byte) DoOption {
	sum := sha256.Sum256(payload)
	fp := hex.EncodeToString(sum[:])
	return func(c *call) { c.fingerprint = fp }
}

// mismatch reports whether a record's fingerprint rules out a request's.
func mismatch(stored, given string) bool {
	return stored != "" && given != "" && stored != given
}
