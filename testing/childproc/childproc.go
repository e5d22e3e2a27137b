// Package childproc holds what testing/redisserver, testing/pgserver and
// etcdbackend/testing/etcdserver share to run throwaway server processes
// for tests and the demo as children: starting them in their own
// process group (on Linux, killed when this process dies), picking free
// loopback ports, and reading their log files.
//
// It is the test harness of fencelock's own modules (the library, cmd,
// etcdbackend, fencelockprom), public so that each of them can use it; it
// is not part of the library's API, and no library package imports it.
package childproc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// FreePort asks the kernel for a free loopback port. The port is released
// before the server binds it, so a race is possible: callers retry with a
// new port when the server reports the address in use.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("picking a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FileSize returns the size of the file at path, or 0.
func FileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// ReadFrom returns the contents of the file at path from offset off on, or
// "" when it cannot be read.
func ReadFrom(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, off, 1<<62))
	return string(b)
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	if n <= 0 || s == "" {
		return ""
	}
	i := len(s)
	for ; n > 0 && i > 0; n-- {
		i = strings.LastIndexByte(s[:i], '\n')
		if i < 0 {
			return s
		}
	}
	return s[i+1:]
}

// Launch calls launch until it does not fail with an error matching inUse
// (the port was taken), at most attempts times. With a pick function, *port
// is set to a fresh port from it before each call; without one (a fixed
// port) the call is retried after a short, growing pause.
func Launch(port *int, pick func() (int, error), attempts int, inUse error, launch func() error) error {
	var err error
	for attempt := 1; attempt <= attempts; attempt++ {
		if pick != nil {
			if *port, err = pick(); err != nil {
				return err
			}
		}
		err = launch()
		if !errors.Is(err, inUse) {
			return err
		}
		if pick == nil && attempt < attempts {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		}
	}
	return err
}
