package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server child process.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	dir  string
}

// startRedis runs redis-server on a free loopback port without persistence
// and waits until it answers PING.
func startRedis() (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (install it, or pass --redis host:port): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "peers-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir}
	if err := waitForPing(s.addr, 10*time.Second); err != nil {
		logText, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		s.stop()
		return nil, fmt.Errorf("%w; its log:\n%s", err, logText)
	}
	return s, nil
}

// stop kills the server and removes its directory.
func (s *redisServer) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
	os.RemoveAll(s.dir)
}

// freePort asks the kernel for a free loopback port. Another process could
// take it before redis-server binds it; then startRedis fails at PING.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitForPing retries PING on addr until it gets PONG or limit passes.
func waitForPing(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := ping(addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server at %s not ready after %v: %w", addr, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ping sends PING over a connection of its own (a go-redis client without
// retries), so that each try of waitForPing dials afresh.
func ping(addr string) error {
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return rdb.Ping(ctx).Err()
}
