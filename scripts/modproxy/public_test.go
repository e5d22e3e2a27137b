package main

import (
	"slices"
	"strings"
	"testing"
)

// The public modules are go.work's, the tooling and the test harnesses
// left out: the list the outside-user test installs and scripts/apidiff.sh
// reports on.
func TestPublicDirs(t *testing.T) {
	dirs, err := publicDirs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".", "cmd", "redisbackend/rueidistransport"} {
		if !slices.Contains(dirs, want) {
			t.Errorf("public modules %q lack %s", dirs, want)
		}
	}
	for _, dir := range dirs {
		if tooling[dir] || strings.Contains("/"+dir+"/", "/testing/") {
			t.Errorf("public modules %q include %s, which is tooling or a test harness", dirs, dir)
		}
	}
	if _, err := publicDirs(t.TempDir()); err == nil {
		t.Error("publicDirs of a directory without go.work: no error")
	}
}
