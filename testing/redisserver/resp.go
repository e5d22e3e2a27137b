package redisserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// replyError is an error reply ("-ERR ...") from the server, as opposed to a
// network or protocol failure.
type replyError string

func (e replyError) Error() string { return "redisserver: server replied " + string(e) }

// maxReplyDepth bounds the nesting of arrays command accepts.
const maxReplyDepth = 8

// command sends one command as a RESP2 array over a fresh connection to addr
// and returns the reply: a string for a simple or bulk string, an int64 for
// an integer, nil for a nil bulk string or array, and []any for an array. An
// error reply is returned as a replyError. timeout bounds the whole exchange.
func command(addr string, timeout time.Duration, args ...string) (any, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(conn), 0)
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

func readReply(r *bufio.Reader, depth int) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("redisserver: empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, replyError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("redisserver: bad bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("redisserver: bad array length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		if depth >= maxReplyDepth {
			return nil, errors.New("redisserver: reply nested too deeply")
		}
		items := make([]any, n)
		for i := range items {
			if items[i], err = readReply(r, depth+1); err != nil {
				return nil, err
			}
		}
		return items, nil
	}
	return nil, fmt.Errorf("redisserver: unsupported reply %q", line)
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
