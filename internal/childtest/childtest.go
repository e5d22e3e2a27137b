// Package childtest runs parts of a test in other processes, as the
// multi-process tests need (several Clients that really are separate
// processes, one of them killed with SIGKILL): the test binary is started
// again to run one test function, which finds its instructions in its
// environment and does nothing when run normally.
package childtest

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
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
