// Command fencelock is fencelock's command-line tool.
//
//	fencelock demo [flags]          multi-process demo: mutex, expiry, renew, pause, crash, restart, fair, semaphore, rwlock, election, jobs, failover, cluster-failover; --backend redis, redlock or etcd
//	fencelock ls [flags]            the locks held in a namespace: key, token, owner, identity, fence, ttl, holds, waiters
//	fencelock inspect KEY [flags]   a lock's state in Redis: holder, fence, lease left, waiters
//	fencelock unlock --yes KEY      free a stuck lock, logged (alias: force-release)
//	fencelock watch [flags]         ls, live
//	fencelock version               module, Go and commit versions
//	fencelock dashboard [flags]     a live web page of a namespace's locks
//
// Run "fencelock help" for the list of commands and "fencelock demo -h" for
// the demo's flags. The demo is described in package internal/demo.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/cmd/internal/cliflags"
	"github.com/fencelock/fencelock/cmd/internal/demo"
	"github.com/fencelock/fencelock/cmd/internal/exitcode"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

func main() {
	// go-redis logs what goes wrong in its pool (each failed dial, "pool.go:
	// ... failed to dial") on stderr, through a logger of its own; a
	// command says what went wrong in its one line.
	logging.Disable()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is a subcommand.
type command struct {
	name     string
	summary  string
	hidden   bool // not listed; still has help unless internal
	internal bool // run by fencelock itself, not by people
	run      func(args []string, stdout, stderr io.Writer) int
}

// commands lists the subcommands.
func commands() []command {
	return []command{
		{name: "demo", summary: "run worker processes against one lock: mutex, expiry, renew, pause, crash, restart, fair lock, primitives, failovers", run: runDemo},
		{name: "ls", summary: "list the locks held in a namespace: holder token, identity, fence, ttl, waiters", run: runLs},
		{name: "inspect", summary: "show a lock's state in Redis: holder, fence, lease left, waiters", run: runInspect},
		{name: "unlock", summary: "free a lock whoever holds it (--yes), logged with who did it (operators)", run: runUnlock},
		{name: "force-release", hidden: true, run: runForceRelease}, // unlock's former name
		{name: "watch", summary: "list the locks held in a namespace, live, until interrupted", run: runWatch},
		{name: "version", summary: "print the fencelock module's version, the Go version and the commit", run: runVersion},
		{name: "dashboard", summary: "serve a live web page of a namespace's locks: holders, fences, TTLs, hand-offs", run: runDashboard},
		{name: "demo-worker", hidden: true, internal: true, run: func([]string, io.Writer, io.Writer) int { return demo.WorkerMain() }},
		{name: "help", summary: "show help for a command", run: runHelp},
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `fencelock: a distributed lock for Go on Redis, with fencing tokens.

Usage:
  fencelock <command> [flags]

Commands:
`)
	for _, c := range commands() {
		if !c.hidden {
			fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprint(w, `
Run "fencelock <command> -h" for a command's flags.
`)
}

// run is main without os.Exit: it returns the exit status, the convention
// of every fencelock command (internal/exitcode): 0 ok, 1 a check failed
// (a demo scenario's FAIL), 2 could not run (bad usage, Redis unreachable,
// a refused argument), 3 could not run because Redis refused the
// credentials or the user's permissions, 130 interrupted.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "fencelock: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func runHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] && !c.internal && c.name != "help" {
			return c.run([]string{"-h"}, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "fencelock help: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// runDemo is "fencelock demo" (internal/demo.Main, which cmd/etcddemo
// shares); workers are this binary, re-executed as "demo-worker".
func runDemo(args []string, stdout, stderr io.Writer) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, exitcode.Message("fencelock demo", fmt.Errorf("cannot find this program to start workers: %w", err)))
		return exitcode.CouldNotRun
	}
	return demo.Main(args, stdout, stderr, demo.MainOptions{WorkerCommand: []string{self, "demo-worker"}})
}

// redisDialError is the error of a first command (PING) to Redis that
// failed: a server that answered but refused the credentials or the
// user's permissions is a configuration to fix (it matches
// fencelock.ErrMisconfigured, and the command exits exitcode.Refused); any
// other failure means Redis could not be reached.
func redisDialError(err error) error {
	switch {
	case redis.IsAuthError(err):
		return refusedError{"Redis refused the credentials", err}
	case redis.IsPermissionError(err):
		return refusedError{"Redis refused the user's permissions", err}
	}
	return fmt.Errorf("cannot reach Redis: %w", err)
}

// refusedError is a Redis refusal of the command's configuration (see
// redisDialError).
type refusedError struct {
	what string
	err  error
}

func (e refusedError) Error() string   { return e.what + ": " + e.err.Error() }
func (e refusedError) Unwrap() []error { return []error{fencelock.ErrMisconfigured, e.err} }

// couldNotRunCode is the exit status of a command that could not run
// because of err: exitcode.Refused when the server refused the command's
// credentials or permissions (fencelock.ErrMisconfigured), else
// exitcode.CouldNotRun.
func couldNotRunCode(err error) int {
	if errors.Is(err, fencelock.ErrMisconfigured) {
		return exitcode.Refused
	}
	return exitcode.CouldNotRun
}

// printFlags lists fs's flags as every fencelock command does.
func printFlags(w io.Writer, fs *flag.FlagSet) { cliflags.Print(w, fs) }
