package redisserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// replyError is an error reply ("-ERR ...") from the server, as opposed to a
// network or protocol failure.
type replyError string

func (e replyError) Error() string { return "redisserver: server replied " + string(e) }

// command sends one command to addr over a connection of its own (a
// go-redis client made for it, without retries) and returns the reply: a
// string for a simple or bulk string, an int64 for an integer, nil for a
// nil bulk string or array, and []any for an array. An error reply is
// returned as a replyError. timeout bounds the whole exchange.
//
// A client of its own: the harness talks to servers that are paused,
// killed, half-configured cluster nodes and sentinels, and must not
// follow redirections, retry or keep connections between commands.
func command(addr string, timeout time.Duration, args ...string) (any, error) {
	rdb := redis.NewClient(&redis.Options{
		Addr:            addr,
		Protocol:        2, // replies as RESP2 types: arrays, not maps
		DisableIdentity: true,
		MaxRetries:      -1,
		PoolSize:        1,
		DialTimeout:     timeout,
		ReadTimeout:     timeout,
		WriteTimeout:    timeout,
	})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmdArgs := make([]any, len(args))
	for i, a := range args {
		cmdArgs[i] = a
	}
	reply, err := rdb.Do(ctx, cmdArgs...).Result()
	var rerr redis.Error
	switch {
	case errors.Is(err, redis.Nil):
		return nil, nil
	case errors.As(err, &rerr):
		return nil, replyError(rerr.Error())
	case err != nil:
		return nil, err
	}
	return reply, nil
}

// commandString is command for replies that are strings (simple or bulk).
func commandString(addr string, timeout time.Duration, args ...string) (string, error) {
	reply, err := command(addr, timeout, args...)
	if err != nil {
		return "", err
	}
	s, ok := reply.(string)
	if !ok {
		return "", fmt.Errorf("redisserver: %s: unexpected reply %v", strings.Join(args, " "), reply)
	}
	return s, nil
}

// commandOK is command for commands that answer +OK.
func commandOK(addr string, timeout time.Duration, args ...string) error {
	s, err := commandString(addr, timeout, args...)
	if err == nil && s != "OK" {
		err = fmt.Errorf("redisserver: %s: unexpected reply %q", strings.Join(args, " "), s)
	}
	return err
}

// infoFields parses the "field:value" lines of an INFO-style reply, such as
// CLUSTER INFO.
func infoFields(s string) map[string]string {
	fields := make(map[string]string)
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			fields[k] = v
		}
	}
	return fields
}
