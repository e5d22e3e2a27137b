package redisbackend

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fencelock/fencelock/driver"
	"github.com/redis/go-redis/v9"
)

// refused reports whether err is Redis refusing the client itself, which
// no retry can change:
//   - its credentials: WRONGPASS (a wrong password, or a disabled user,
//     when go-redis logs a new connection in) and NOAUTH (no password where
//     the server requires one; to a command of more than 10 arguments,
//     such as a script call, Redis answers "ERR Protocol error:
//     unauthenticated multibulk length" instead, which go-redis's
//     IsAuthError also matches);
//   - its permissions: NOPERM (the user's ACL denies a command, a key or a
//     channel), and the error of a script whose call the ACL denies
//     (Redis 7.0 words it "The user executing the script can't ...", such
//     as a release's PUBLISH to a channel the user may not use).
func refused(err error) bool {
	if err == nil {
		return false
	}
	if redis.IsAuthError(err) || redis.IsPermissionError(err) {
		return true
	}
	var reply redis.Error
	return errors.As(err, &reply) && strings.Contains(reply.Error(), "The user executing the script can't")
}

// misconfigured marks a refusal (refused) with driver.ErrMisconfigured,
// so that the Client stops at once instead of retrying, and, when Redis
// refused the request before running any of it, with driver.ErrNotSent:
// nothing to clean up. Other errors, and errors already marked, are
// returned as they are.
func misconfigured(err error) error {
	if !refused(err) || errors.Is(err, driver.ErrMisconfigured) {
		return err
	}
	return &refusalError{err: err, notRun: !inScript(err)}
}

// inScript reports whether err is the error of a script that failed while
// it ran (Redis names the script's line: "@user_script:N"): the calls
// before the failing one were applied. A refusal of the command itself
// (its credentials, or the ACL's check of the command and its keys) comes
// before anything runs.
func inScript(err error) bool {
	return strings.Contains(err.Error(), "@user_script")
}

// refusalError is a refusal by Redis (misconfigured). It reads as
// driver.ErrMisconfigured's message and Redis's reply, and matches
// driver.ErrMisconfigured, driver.ErrNotSent when nothing of the
// request ran, and the reply.
type refusalError struct {
	err    error
	notRun bool
}

// Error reads as driver.ErrMisconfigured's message, then Redis's reply.
func (e *refusalError) Error() string {
	return fmt.Sprintf("%v: %v", driver.ErrMisconfigured, e.err)
}

// Is reports whether target is driver.ErrMisconfigured, or
// driver.ErrNotSent for a request refused before it ran.
func (e *refusalError) Is(target error) bool {
	return target == driver.ErrMisconfigured || (e.notRun && target == driver.ErrNotSent)
}

// Unwrap returns Redis's reply.
func (e *refusalError) Unwrap() error { return e.err }
