package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/testing/servertest"
)

// fencelock unlock frees a lock whoever holds it, by name or by full Redis
// key, only with --yes, and logs who did it (user, host, time), why, and
// the tokens released; the next holder gets a larger fence.
func TestUnlock(t *testing.T) {
	srv := servertest.Redis(t)
	c := newLockClient(t, srv.Addr(), "app", fencelock.WithIdentity("billing-7:4242"))
	ctx := context.Background()
	lk, err := c.TryAcquire(fencelock.WithOwner(ctx, "worker-3"), "job:nightly", time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	// Without --yes: refused, with a clear message, and nothing released.
	code, out, errOut := runCLI("unlock", "--redis", srv.Addr(), "--namespace", "app", "job:nightly")
	if code != 2 || out != "" || !strings.Contains(errOut, `fencelock unlock: refusing to free "job:nightly" without --yes`) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("without --yes: exit %d, %q, %q", code, out, errOut)
	}
	if !lk.Held() {
		t.Fatal("the lock was released without --yes")
	}

	code, out, errOut = runCLI("unlock", "app:{job:nightly}:lock", "--yes", "--redis", srv.Addr(), "--reason", "worker-3 is gone (INC-7)")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := fmt.Sprintf("job:nightly: released 1 hold(s) of owner worker-3 (fence %d), held by billing-7:4242\n", lk.Fence()); out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	who, host := operator()
	for _, want := range []string{
		// Before anything is released: ForceRelease's line, with who.
		`^time=\S+ level=WARN msg="fencelock: force release" user=` + regexp.QuoteMeta(who) + ` host=` + regexp.QuoteMeta(host) +
			` key=job:nightly reason="worker-3 is gone \(INC-7\)" owner=worker-3 `,
		// After: the whole token.
		`(?m)^time=\S+ level=WARN msg="fencelock unlock: released" user=\S+ host=\S+ key=job:nightly namespace=app tokens=\[` +
			regexp.QuoteMeta(lk.Token()) + `\] owner=worker-3 identity=billing-7:4242 fence=` + fmt.Sprint(lk.Fence()) + ` reason="worker-3 is gone \(INC-7\)"$`,
	} {
		if !regexp.MustCompile(want).MatchString(errOut) {
			t.Errorf("stderr lacks %s:\n%s", want, errOut)
		}
	}
	next, err := c.TryAcquire(ctx, "job:nightly", time.Minute)
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	if next.Fence() <= lk.Fence() {
		t.Errorf("fence %d not above %d", next.Fence(), lk.Fence())
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The default reason says who; a free lock is no error.
	code, out, errOut = runCLI("unlock", "--yes", "--redis", srv.Addr(), "--namespace", "app", "job:nightly")
	if code != 0 || !strings.Contains(out, "not held") || errOut != "" {
		t.Errorf("a free lock: exit %d, %q, %q", code, out, errOut)
	}
}

// force-release is unlock's other name, --yes included; a default reason
// names the user and host.
func TestForceReleaseAlias(t *testing.T) {
	srv := servertest.Redis(t)
	c := newLockClient(t, srv.Addr(), "lock")
	lk, err := c.TryAcquire(context.Background(), "k", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI("force-release", "--redis", srv.Addr(), "k"); code != 2 || !strings.Contains(errOut, "fencelock force-release: refusing") {
		t.Errorf("without --yes: exit %d, %q", code, errOut)
	}
	code, out, errOut := runCLI("force-release", "--yes", "--redis", srv.Addr(), "k")
	who, host := operator()
	if code != 0 || !strings.Contains(out, "k: released 1 hold(s)") || !strings.Contains(errOut, fmt.Sprintf(`reason="fencelock force-release by %s@%s"`, who, host)) {
		t.Errorf("exit %d, %q, %q", code, out, errOut)
	}
	if lk.Held() && lk.Err() == nil {
		// The holder learns at its next renewal; the server already freed it.
		if info, err := c.Inspect(context.Background(), "k"); err != nil || info.Held {
			t.Errorf("after force-release: %+v, %v", info, err)
		}
	}
}

func TestUnlockBadUsage(t *testing.T) {
	srv := servertest.Redis(t)
	for _, args := range [][]string{
		{"unlock", "--yes", "--redis", srv.Addr()},                                    // no key
		{"unlock", "--yes", "--redis", srv.Addr(), "a", "b"},                          // two keys
		{"unlock", "--yes", "--redis", srv.Addr(), "--reason", "   ", "k"},            // blank reason
		{"unlock", "--yes", "--namespace", "other", "lock:{k}:lock"},                  // two namespaces
		{"unlock", "--yes", "--redis", "redis://:hunter2pass@local host:6379/0", "k"}, // bad URL
	} {
		code, _, errOut := runCLI(args...)
		if code != 2 || !strings.HasPrefix(errOut, "fencelock unlock: ") || !strings.Contains(errOut, `Run "fencelock unlock -h"`) || strings.Contains(errOut, "hunter2") {
			t.Errorf("%v: exit %d, %q; want 2 and a usage error", args, code, errOut)
		}
	}
	// Could not run: one line, one prefix, no pointer to -h.
	for _, args := range [][]string{
		{"unlock", "--yes", "--redis", "127.0.0.1:1", "k"},
		{"unlock", "--yes", "--redis", srv.Addr(), "--namespace", "a{b", "k"},
	} {
		code, _, errOut := runCLI(args...)
		msg := strings.TrimSpace(errOut)
		if code != 2 || strings.Contains(msg, "\n") || strings.Count(msg, "fencelock") != 1 || strings.Contains(msg, "-h") {
			t.Errorf("%v: exit %d, %q", args, code, errOut)
		}
	}
}
