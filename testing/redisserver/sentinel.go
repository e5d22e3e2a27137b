package redisserver

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	// sentinelConfName is the sentinel's config file, inside its Dir.
	// Sentinel rewrites it (its id, the replicas and sentinels it found, the
	// current master after a failover), so it must stay writable.
	sentinelConfName = "sentinel.conf"
	// sentinelWrapperName is the script, inside Dir, that runs redis-server
	// with the config file first (see StartSentinel).
	sentinelWrapperName = "redis-sentinel.sh"
	// sentinelReadyTimeout bounds how long StartSentinel waits for the
	// sentinel to be connected to its master.
	sentinelReadyTimeout = 10 * time.Second
	// Failure detection settings, short for tests.
	sentinelDownAfter       = 1000 // ms
	sentinelFailoverTimeout = 5000 // ms
)

// StartSentinel starts a Redis Sentinel (redis-server --sentinel) on
// 127.0.0.1 that monitors master under name, with quorum 1,
// down-after-milliseconds 1000 and failover-timeout 5000, and waits until it
// answers SENTINEL get-master-addr-by-name with master's address and is
// connected to master. It returns a Server like Start does: its Dir holds
// the sentinel's config file, which Sentinel rewrites, and Restart keeps it.
// opts.Port and opts.Args apply to the sentinel. The error wraps ErrNotFound
// if redis-server cannot be found. Call Close when done.
//
// redis-server only reads a config file named as its first argument, and
// Sentinel refuses to run without one, so the Server runs a small shell
// script (in Dir) that puts the file first and execs redis-server: Dir must
// allow executing files.
func StartSentinel(master *Server, name string, opts Options) (*Server, error) {
	if master == nil {
		return nil, fmt.Errorf("redisserver: StartSentinel needs a master")
	}
	return startSentinel(sentinelConfig{
		name:            name,
		masterPort:      master.Port(),
		quorum:          1,
		downAfter:       sentinelDownAfter,
		failoverTimeout: sentinelFailoverTimeout,
	}, opts)
}

// sentinelConfig is what a sentinel's config file says about the master it
// monitors.
type sentinelConfig struct {
	name            string
	masterPort      int
	quorum          int
	downAfter       int // ms
	failoverTimeout int // ms
	parallelSyncs   int // 0 leaves Sentinel's default
	// debug are SENTINEL DEBUG parameter/value pairs, set once the sentinel
	// has started (they are not in the config file: Restart loses them).
	debug []string
}

func (c sentinelConfig) String() string {
	s := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s %[5]d\n",
		c.name, c.masterPort, c.quorum, c.downAfter, c.failoverTimeout)
	if c.parallelSyncs > 0 {
		s += fmt.Sprintf("sentinel parallel-syncs %s %d\n", c.name, c.parallelSyncs)
	}
	return s
}

// startSentinel is StartSentinel for any configuration: it writes the config
// file and the wrapper script, launches the sentinel and waits until it
// reports the master.
func startSentinel(cfg sentinelConfig, opts Options) (*Server, error) {
	name := cfg.name
	if err := checkSentinelName(name); err != nil {
		return nil, err
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("redisserver: invalid port %d", opts.Port)
	}
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redisserver-sentinel-")
	if err != nil {
		return nil, fmt.Errorf("redisserver: creating temp dir: %w", err)
	}
	conf := filepath.Join(dir, sentinelConfName)
	wrapper := filepath.Join(dir, sentinelWrapperName)
	script := "#!/bin/sh\n" +
		"# Written by redisserver.StartSentinel: redis-server reads a config file\n" +
		"# only as its first argument, before the options redisserver passes.\n" +
		"exec " + shellQuote(bin) + " " + shellQuote(conf) + " --sentinel \"$@\"\n"
	if err := os.WriteFile(conf, []byte(cfg.String()), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redisserver: writing sentinel config: %w", err)
	}
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redisserver: writing sentinel wrapper: %w", err)
	}

	s, err := launch(wrapper, dir, opts)
	if err != nil {
		return nil, err
	}
	if len(cfg.debug) > 0 {
		if err := commandOK(s.Addr(), adminTimeout, append([]string{"SENTINEL", "DEBUG"}, cfg.debug...)...); err != nil {
			s.Close()
			return nil, fmt.Errorf("redisserver: sentinel %s: SENTINEL DEBUG: %w", s.Addr(), err)
		}
	}
	want := net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.masterPort))
	if err := waitSentinel(s.Addr(), name, want, sentinelReadyTimeout); err != nil {
		s.logfLog("sentinel did not report its master")
		s.Close()
		return nil, err
	}
	return s, nil
}

// checkSentinelName rejects a master name that cannot be written into a
// sentinel config line.
func checkSentinelName(name string) error {
	if name == "" || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == '"' || r == '\'' || r == 0x7f }) {
		return fmt.Errorf("redisserver: invalid sentinel master name %q: it must be non-empty, without spaces, quotes or control characters", name)
	}
	return nil
}

// waitSentinel polls the sentinel at addr until it reports masterAddr as the
// address of name and is connected to it, or timeout passes.
func waitSentinel(addr, name, masterAddr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := checkSentinel(addr, name, masterAddr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redisserver: sentinel %s not ready after %v: %w", addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func checkSentinel(addr, name, masterAddr string) error {
	reply, err := command(addr, adminTimeout, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
	if err != nil {
		return err
	}
	hp, ok := reply.([]any)
	if !ok || len(hp) != 2 {
		return fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s = %v", name, reply)
	}
	host, _ := hp[0].(string)
	port, _ := hp[1].(string)
	if got := net.JoinHostPort(host, port); got != masterAddr {
		return fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s = %s, want %s", name, got, masterAddr)
	}
	reply, err = command(addr, adminTimeout, "SENTINEL", "MASTER", name)
	if err != nil {
		return err
	}
	kv, ok := reply.([]any)
	if !ok {
		return fmt.Errorf("SENTINEL MASTER %s = %v", name, reply)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "flags" {
			flags, _ := kv[i+1].(string)
			if flags != "master" {
				return fmt.Errorf("SENTINEL MASTER %s: flags %q, want \"master\"", name, flags)
			}
			return nil
		}
	}
	return fmt.Errorf("SENTINEL MASTER %s: no flags in %v", name, reply)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
