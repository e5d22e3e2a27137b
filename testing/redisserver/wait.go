package redisserver

import (
	"fmt"
	"strings"
	"time"
)

// pollInterval is how often the wait functions of the replicated topologies
// check their condition. Short, because the tests that use them measure
// failover times; each check is a few loopback round trips.
const pollInterval = 50 * time.Millisecond

// waitUntil calls check every pollInterval until it returns nil or timeout
// passes. The error says what was awaited, for how long, and why the last
// check failed.
func waitUntil(what string, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redisserver: %s: not done after %v: %w", what, timeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// info returns the fields of addr's INFO section.
func info(addr, section string) (map[string]string, error) {
	s, err := commandString(addr, adminTimeout, "INFO", section)
	if err != nil {
		return nil, fmt.Errorf("redisserver: INFO %s on %s: %w", section, addr, err)
	}
	return infoFields(s), nil
}

// answering reports whether s can be asked something: it is running and not
// paused. A paused server accepts connections but answers nothing, so asking
// it would only wait for adminTimeout.
func answering(s *Server) bool {
	return s.Running() && !s.Paused()
}

// addrsOf returns the servers' addresses, joined with ", ", for messages.
func addrsOf(servers []*Server) string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return strings.Join(addrs, ", ")
}
