package redisbackend

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/driver"
)

// A failure to dial matches driver.ErrNotSent, and says so once: also when
// the transport has marked it already (as rueidistransport does).
func TestClassifyMarksNotSentOnce(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	for _, err := range []error{dial, fmt.Errorf("%w: %w", driver.ErrNotSent, dial)} {
		got := classify(err)
		if !errors.Is(got, driver.ErrNotSent) {
			t.Errorf("classify(%v) = %v, want ErrNotSent", err, got)
		}
		if n := strings.Count(got.Error(), "not sent"); n != 1 {
			t.Errorf("classify(%v) = %q: says not sent %d times, want once", err, got, n)
		}
	}
}
