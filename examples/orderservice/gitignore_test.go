package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The files the documented commands (README.md, docs/) leave in the
// working tree are ignored by git, so that "git status" stays clean: the
// service's default SQLite file with its WAL and shared-memory files (go
// run ./examples/orderservice, from the repository root or from here), and
// binaries of go build: orderservice.db* must not show up as untracked.
func TestReadmeLeftoversIgnored(t *testing.T) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout (%v): nothing to ignore", err)
	}
	top := strings.TrimSpace(string(root))
	db := defaultConfig().SQLitePath
	var paths []string
	for _, dir := range []string{top, filepath.Join(top, "examples", "orderservice")} {
		for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
			paths = append(paths, filepath.Join(dir, db+suffix))
		}
	}
	paths = append(paths, filepath.Join(top, "fencelock"), filepath.Join(top, "orderservice"),
		filepath.Join(top, "examples", "orderservice", "orderservice"), filepath.Join(top, "orderservice.test"))
	for _, p := range paths {
		cmd := exec.Command("git", "check-ignore", "--no-index", "-q", p)
		cmd.Dir = top
		if err := cmd.Run(); err != nil {
			t.Errorf("%s is not ignored by git (%v)", p, err)
		}
	}
	// Sources stay tracked.
	for _, p := range []string{"cmd/fencelock/main.go", "examples/orderservice/main.go"} {
		cmd := exec.Command("git", "check-ignore", "--no-index", "-q", p)
		cmd.Dir = top
		if cmd.Run() == nil {
			t.Errorf("%s is ignored", p)
		}
	}
}
