package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/testing/servertest"
)

// The commands show and free the holds of every kind: the permits of a
// semaphore, the read and write holds of a read-write lock, beside plain
// locks; a full Redis key names its kind, and a key of the layout that
// keeps no holds is refused.

// kindsFixture holds, in namespace "lock" of srv: 3 permits of
// "partner-api" (whose plain lock is free), 2 read holds of "doc", the
// write hold of "doc2", and the plain lock "job".
type kindsFixture struct {
	permits, readers []*fencelock.Lock
	writer, lock     *fencelock.Lock
}

func newKindsFixture(t *testing.T, addr string) kindsFixture {
	t.Helper()
	c := newLockClient(t, addr, "lock")
	ctx := context.Background()
	var f kindsFixture
	must := func(lk *fencelock.Lock, err error) *fencelock.Lock {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return lk
	}
	for range 3 {
		f.permits = append(f.permits, must(c.Semaphore("partner-api", 3).TryAcquire(ctx, time.Minute)))
	}
	for range 2 {
		f.readers = append(f.readers, must(c.RWLock("doc").TryAcquireRead(ctx, time.Minute)))
	}
	f.writer = must(c.RWLock("doc2").TryAcquireWrite(ctx, time.Minute))
	f.lock = must(c.TryAcquire(ctx, "job", time.Minute))
	return f
}

func TestLsEveryKind(t *testing.T) {
	srv := servertest.Redis(t)
	f := newKindsFixture(t, srv.Addr())
	code, out, errOut := runCLI("ls", "--redis", srv.Addr())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 8 || !regexp.MustCompile(`^KEY +KIND +TOKEN +OWNER +IDENTITY +FENCE +TTL +HOLDS +WAITERS$`).MatchString(lines[0]) {
		t.Fatalf("want a header and 7 holds:\n%s", out)
	}
	row := func(name, kind string, lk *fencelock.Lock) string {
		return fmt.Sprintf(`^%s +%s +%s… +- +- +%d +(\d+(\.\d)?s|1m0s) +1 +0$`, regexp.QuoteMeta(name), kind, regexp.QuoteMeta(lk.Token()[:8]), lk.Fence())
	}
	for i, want := range []string{
		row("doc", "read", f.readers[0]), row("doc", "read", f.readers[1]), row("doc2", "write", f.writer),
		row("job", "lock", f.lock),
		row("partner-api", "permit", f.permits[0]), row("partner-api", "permit", f.permits[1]), row("partner-api", "permit", f.permits[2]),
	} {
		if !regexp.MustCompile(want).MatchString(lines[i+1]) {
			t.Errorf("line %d: %q, want %s", i+1, lines[i+1], want)
		}
	}
	code, out, _ = runCLI("ls", "--json", "--redis", srv.Addr())
	var got []struct {
		Key, Kind string
		LockKey   string `json:"lock_key"`
		Tokens    []string
		Fence     int64
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got) != 7 {
		t.Fatalf("--json: exit %d, %v:\n%s", code, err, out)
	}
	if g := got[6]; g.Key != "partner-api" || g.Kind != "permit" || g.LockKey != "lock:{partner-api}:sem" ||
		len(g.Tokens) != 1 || g.Tokens[0] != f.permits[2].Token() || g.Fence != f.permits[2].Fence() {
		t.Errorf("--json, the last permit: %+v (%s)", g, out)
	}
}

func TestInspectEveryKind(t *testing.T) {
	srv := servertest.Redis(t)
	f := newKindsFixture(t, srv.Addr())

	// By name: the plain lock is free, its permits are not.
	code, out, errOut := runCLI("inspect", "--redis", srv.Addr(), "partner-api")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	wants := []string{"lock:{partner-api}:lock\n  state     free\n", "lock:{partner-api}:sem\n  state     3 permit(s) held\n"}
	for _, p := range f.permits {
		wants = append(wants, fmt.Sprintf("  permit    token %s…, fence %d, lease ends in ", p.Token()[:8], p.Fence()))
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("inspect partner-api: output lacks %q:\n%s", want, out)
		}
	}

	// By the semaphore's key, as redis-cli shows it: that kind alone.
	code, out, errOut = runCLI("inspect", "--redis", srv.Addr(), "lock:{partner-api}:sem")
	if code != 0 || !strings.HasPrefix(out, "lock:{partner-api}:sem\n  state     3 permit(s) held\n") ||
		strings.Contains(out, "lock:{partner-api}:lock") || strings.Contains(out, "{lock:") {
		t.Errorf("inspect lock:{partner-api}:sem: exit %d:\n%s%s", code, out, errOut)
	}

	// A read-write lock, by name and by key.
	code, out, _ = runCLI("inspect", "--redis", srv.Addr(), "doc", "lock:{doc2}:rw")
	for _, want := range []string{
		"lock:{doc}:rw\n  state     held by 2 reader(s)\n",
		fmt.Sprintf("  read      token %s…, fence %d, lease ends in ", f.readers[1].Token()[:8], f.readers[1].Fence()),
		"lock:{doc2}:rw\n  state     held by a writer\n",
		fmt.Sprintf("  write     token %s…, fence %d, lease ends in ", f.writer.Token()[:8], f.writer.Fence()),
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("inspect doc lock:{doc2}:rw: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}

	// --json: every kind of the name.
	code, out, _ = runCLI("inspect", "--json", "--redis", srv.Addr(), "partner-api")
	var got struct {
		Held   bool `json:"held"`
		Others []struct {
			Kind, Token string
			Fence       int64
			TTL         int64 `json:"ttl_ms"`
		} `json:"others"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.Held || len(got.Others) != 3 ||
		got.Others[0].Kind != "permit" || got.Others[0].Token != f.permits[0].Token() || got.Others[0].TTL <= 0 {
		t.Errorf("--json: exit %d, %v: %+v\n%s", code, err, got, out)
	}

	// A key of the layout that keeps no holds: refused, naming it.
	for _, key := range []string{"lock:{partner-api}:sem:info", "lock:{job}:fence"} {
		code, out, errOut := runCLI("inspect", "--redis", srv.Addr(), key)
		if code != 2 || out != "" || !strings.Contains(errOut, fmt.Sprintf("%q is a Redis key", key)) {
			t.Errorf("inspect %s: exit %d, %q, %q; want 2 and an error naming the key", key, code, out, errOut)
		}
	}
}

// unlock of a name frees the holds of every kind seen at the start; the
// key of one kind frees that kind alone.
func TestUnlockEveryKind(t *testing.T) {
	srv := servertest.Redis(t)
	f := newKindsFixture(t, srv.Addr())
	admin := newLockClient(t, srv.Addr(), "lock")
	ctx := context.Background()

	code, out, errOut := runCLI("unlock", "--yes", "--redis", srv.Addr(), "--reason", "quota stuck", "lock:{partner-api}:sem")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("partner-api: released 3 permit(s) (fences %d, %d, %d)\n",
		f.permits[0].Fence(), f.permits[1].Fence(), f.permits[2].Fence())) {
		t.Fatalf("unlock lock:{partner-api}:sem: exit %d, %q, %q", code, out, errOut)
	}
	if info, err := admin.Inspect(ctx, "partner-api"); err != nil || info.Held || len(info.Others) != 0 {
		t.Errorf("after unlock of the permits: %+v, %v", info, err)
	}

	code, out, errOut = runCLI("unlock", "--yes", "--redis", srv.Addr(), "doc")
	if code != 0 || !strings.Contains(out, "doc: released 2 read hold(s)") {
		t.Fatalf("unlock doc: exit %d, %q, %q", code, out, errOut)
	}
	if _, err := admin.RWLock("doc").TryAcquireWrite(ctx, time.Second); err != nil {
		t.Errorf("a writer after unlock doc: %v", err)
	}
	// The plain lock's key frees the plain lock, not the write hold of
	// another name, nor anything else.
	code, out, _ = runCLI("unlock", "--yes", "--redis", srv.Addr(), "lock:{doc2}:lock")
	if code != 0 || !strings.Contains(out, "not held") {
		t.Errorf("unlock lock:{doc2}:lock: exit %d, %q", code, out)
	}
	if info, err := admin.Inspect(ctx, "doc2"); err != nil || len(info.Others) != 1 {
		t.Errorf("the write hold after unlock of the plain lock: %+v, %v", info, err)
	}
	if code, _, errOut := runCLI("unlock", "--yes", "--redis", srv.Addr(), "lock:{doc2}:rw:writers"); code != 2 || !strings.Contains(errOut, "is a Redis key") {
		t.Errorf("unlock of a key without holds: exit %d, %q", code, errOut)
	}
}
