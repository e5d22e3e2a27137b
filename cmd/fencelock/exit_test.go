package main

import (
	"strings"
	"testing"

	"github.com/fencelock/fencelock/testing/servertest"
)

// Every command exits 2 when it could not run, with its error on one line,
// one "fencelock" prefix, and no pointer to -h unless the usage was wrong;
// 1 is kept for a check that ran and failed (a demo FAIL). The demo and
// force-release must not exit 1 here, like a FAIL, nor force-release with
// Redis unreachable point to -h.
func TestCouldNotRunIsExit2(t *testing.T) {
	srv := servertest.Redis(t)
	for _, args := range [][]string{
		{"demo", "--redis", "127.0.0.1:1", "--scenario", "mutex", "--workers", "2"},
		{"force-release", "--yes", "--redis", "127.0.0.1:1", "--reason", "stuck", "k"},
		{"force-release", "--yes", "--redis", srv.Addr(), "--namespace", "a{b", "--reason", "stuck", "k"},
		{"unlock", "--yes", "--redis", "127.0.0.1:1", "k"},
		{"inspect", "--redis", "127.0.0.1:1", "k"},
		{"inspect", "k", "--redis", "127.0.0.1:1"},
		{"ls", "--redis", "127.0.0.1:1"},
		{"ls", "--redis", srv.Addr(), "--namespace", "a{b"},
		{"watch", "--redis", "127.0.0.1:1"},
	} {
		code, _, errOut := runCLI(args...)
		msg := strings.TrimSpace(errOut)
		if code != 2 || strings.Contains(msg, "\n") || strings.Count(msg, "fencelock") != 1 || strings.Contains(msg, "-h for usage") {
			t.Errorf("fencelock %v: exit %d, stderr %q; want 2 and one line with one fencelock prefix", args, code, errOut)
		}
	}
}
