// Package childtest runs parts of a test in other processes, as the
// multi-process tests need (several Clients that really are separate
// processes, one of them killed with SIGKILL): the test binary is started
// again to run one test function, which finds its instructions in its
// environment and does nothing when run normally.
package childtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Start starts the test binary again to run only the test named test, with
// spec (as JSON) in the environment variable env and redisAddr in env +
// "_REDIS". It returns the process and a scanner of its standard output
// (its standard error is this process's); the process is killed at cleanup.
func Start(t testing.TB, test, env, redisAddr string, spec any) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+string(js), env+"_REDIS="+redisAddr)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

// Spec is for the child's test function: when the process was started by
// Start with env, it decodes the spec into v and returns the Redis address
// and true; otherwise (a normal test run) it returns false, and the test
// function returns at once.
func Spec(t testing.TB, env string, v any) (redisAddr string, ok bool) {
	t.Helper()
	js := os.Getenv(env)
	if js == "" {
		return "", false
	}
	if err := json.Unmarshal([]byte(js), v); err != nil {
		t.Fatal(err)
	}
	return os.Getenv(env + "_REDIS"), true
}

// Barrier names a fresh barrier for Together, unique to this run.
func Barrier() string { return fmt.Sprint("childtest:barrier:", time.Now().UnixNano()) }

// Together blocks until procs processes have called it with the same
// barrier on rdb's server, so that they start their work at once however
// long each took to start: each counts itself in, and the last one in lets
// them all go (a list each takes one item from). It gives up after a
// minute.
func Together(ctx context.Context, rdb redis.Cmdable, barrier string, procs int) error {
	n, err := rdb.Incr(ctx, barrier+":in").Result()
	if err != nil {
		return err
	}
	if n == int64(procs) {
		gos := make([]any, procs)
		for i := range gos {
			gos[i] = "go"
		}
		if err := rdb.RPush(ctx, barrier+":go", gos...).Err(); err != nil {
			return err
		}
	}
	if err := rdb.BLPop(ctx, time.Minute, barrier+":go").Err(); err != nil {
		return fmt.Errorf("childtest: %d processes did not all reach %s: %w", procs, barrier, err)
	}
	return nil
}
