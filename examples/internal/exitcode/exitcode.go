// Package exitcode is the exit status convention of the example programs
// (orderservice, quickstart), and the one-line form of the error a command
// prints before it exits. It is a copy of the cmd module's: the examples
// are a module of their own, and one module importing another's internal
// packages would tie it to what that module may change at will (check.sh
// refuses it); the convention is small and stable enough to keep twice.
//
// The convention is diff's and grep's: 1 says the command ran and found
// something wrong, 2 says it could not do its job at all; 3 narrows 2 down
// to a server that refused the command's credentials or permissions.
package exitcode

import "strings"

const (
	// OK: the command did its job; a test or demo passed.
	OK = 0
	// Fail: the command ran to the end and a check failed (a FAIL line:
	// stock oversold, a stale write accepted, two holders at once).
	Fail = 1
	// CouldNotRun: the command could not do its job: bad flags or
	// arguments, a server missing or unreachable, a configuration the
	// service refuses at start-up. No verdict was reached.
	CouldNotRun = 2
	// Refused: the command could not run because the server refused its
	// credentials or its user's permissions (Redis's WRONGPASS, NOAUTH,
	// NOPERM; fencelock.ErrMisconfigured): a configuration to fix, not an
	// outage to wait out.
	Refused = 3
	// Interrupted: stopped by SIGINT or SIGTERM before a verdict (128 +
	// SIGINT's number, as shells report it). A service stopped by a
	// signal after serving exits OK: that is how it is meant to stop.
	Interrupted = 130
)

// Message returns "prefix: err" on one line: the lines of a multi-line
// error (errors.Join) are joined with "; ", and a "fencelock: " that
// would repeat the prefix's word (the error of a fencelock call printed by
// "fencelock demo: ") is dropped, wherever it sits in the chain.
func Message(prefix string, err error) string {
	if err == nil {
		return prefix
	}
	var lines []string
	for line := range strings.Lines(err.Error()) {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	msg := strings.Join(lines, "; ")
	if word, _, _ := strings.Cut(prefix, " "); word != "" {
		msg = strings.TrimPrefix(msg, word+": ")
		msg = strings.ReplaceAll(msg, ": "+word+": ", ": ")
		msg = strings.ReplaceAll(msg, "; "+word+": ", "; ")
	}
	return prefix + ": " + msg
}
