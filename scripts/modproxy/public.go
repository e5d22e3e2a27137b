package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// tooling are the modules of go.work that are not for users to require:
// they are published with the repository's tags all the same, but nothing
// promises their API. Every other module of go.work is public, a module
// in a testing/ directory (a test harness) aside, so that a new module is
// covered by the outside-user test and the API report
// (scripts/apidiff.sh, through -public) without a change here.
var tooling = map[string]bool{
	"bench/peers":      true, // benchmarks against the peer libraries
	"examples":         true, // programs to read and run from a checkout
	"scripts/modproxy": true, // this tool
}

// publicDirs returns the directories (slash-separated, relative to root,
// "." for the root module) of the modules of root's go.work that users
// require: all but the tooling and the test harnesses, in go.work's order.
func publicDirs(root string) ([]string, error) {
	cmd := exec.Command("go", "work", "edit", "-json")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go work edit -json: %w", err)
	}
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &work); err != nil {
		return nil, fmt.Errorf("go work edit -json: %w", err)
	}
	var dirs []string
	for _, u := range work.Use {
		dir := path.Clean(filepath.ToSlash(u.DiskPath))
		if tooling[dir] || slices.Contains(strings.Split(dir, "/"), "testing") {
			continue
		}
		dirs = append(dirs, dir)
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%s/go.work has no public module", root)
	}
	return dirs, nil
}
