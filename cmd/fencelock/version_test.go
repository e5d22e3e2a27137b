package main

import (
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	code, out, errOut := runCLI("version")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// A test binary records the module as "(devel)" and no commit.
	if code != 0 || errOut != "" || len(lines) < 2 || !strings.HasPrefix(lines[0], "fencelock ") ||
		lines[1] != "go        "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := runCLI("version", "extra"); code != 2 || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Errorf("version extra: exit %d, %q", code, errOut)
	}
}
