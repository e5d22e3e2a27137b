package pgserver

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestCompareVersions(t *testing.T) {
	dirs := []string{
		"/usr/lib/postgresql/9.6/bin",
		"/usr/lib/postgresql/15/bin",
		"/usr/lib/postgresql/10/bin",
		"/usr/lib/postgresql/9.5/bin",
		"/usr/lib/postgresql/16/bin",
	}
	slices.SortFunc(dirs, func(a, b string) int { return compareVersions(b, a) })
	want := []string{
		"/usr/lib/postgresql/16/bin",
		"/usr/lib/postgresql/15/bin",
		"/usr/lib/postgresql/10/bin",
		"/usr/lib/postgresql/9.6/bin",
		"/usr/lib/postgresql/9.5/bin",
	}
	if !slices.Equal(dirs, want) {
		t.Errorf("newest first: %v, want %v", dirs, want)
	}
}

func TestReapStale(t *testing.T) {
	base := t.TempDir()
	mk := func(name string) string {
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// A live owner (this process) holds the lock.
	live := mk(dirPrefix + "live")
	lock, err := lockDir(live)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	// A dead owner left its lock file unlocked.
	dead := mk(dirPrefix + "dead")
	if err := os.WriteFile(filepath.Join(dead, lockName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// No lock file: being created (young) or half reaped (old).
	young := mk(dirPrefix + "young")
	old := mk(dirPrefix + "old")
	longAgo := time.Now().Add(-2 * unlockedGrace)
	if err := os.Chtimes(old, longAgo, longAgo); err != nil {
		t.Fatal(err)
	}
	// Not ours.
	other := mk("something-else")
	if err := os.WriteFile(filepath.Join(other, lockName), nil, 0o600); err != nil {
		t.Fatal(err)
	}

	reapStale(base, time.Now())
	for dir, wantKept := range map[string]bool{live: true, dead: false, young: true, old: false, other: true} {
		_, err := os.Stat(dir)
		if kept := err == nil; kept != wantKept {
			t.Errorf("%s: kept %v, want %v", filepath.Base(dir), kept, wantKept)
		}
	}
	if _, err := os.Stat(filepath.Join(live, lockName+".new")); !os.IsNotExist(err) {
		t.Errorf("temporary lock name left behind: %v", err)
	}

	// Once the owner is gone, its directory goes too.
	lock.Close()
	reapStale(base, time.Now())
	if _, err := os.Stat(live); !os.IsNotExist(err) {
		t.Errorf("directory of a closed owner survives: %v", err)
	}
}

// Reaping spares the directory of a running server.
func TestReapSparesLiveServer(t *testing.T) {
	if _, err := Find(); err != nil {
		if os.Getenv("FENCELOCK_REQUIRE_SERVERS") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	srv, err := Start(Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	reapStale(filepath.Dir(srv.Dir()), time.Now().Add(2*unlockedGrace))
	if _, err := os.Stat(filepath.Join(srv.Dir(), dataName, "PG_VERSION")); err != nil {
		t.Fatalf("live server's dir reaped: %v", err)
	}
	if err := probe(context.Background(), srv.URL(), filepath.Join(srv.Dir(), dataName)); err != nil {
		t.Errorf("live server broken after reaping: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(srv.Dir()); !os.IsNotExist(err) {
		t.Errorf("dir survives Close: %v", err)
	}
}
