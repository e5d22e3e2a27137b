package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/fencelock/fencelock/cmd/internal/exitcode"
)

const versionUsage = `Usage: fencelock version

Prints the version of the fencelock module this binary was built from
("(devel)" when built from a checkout rather than installed with
"go install ...@version"), the Go version and platform, and the commit
(with its time, and "modified" for uncommitted changes) when the build
recorded it.
`

// runVersion implements "fencelock version".
func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fencelock version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, versionUsage) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitcode.OK
		}
		return exitcode.CouldNotRun
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "version", "unexpected argument %q", fs.Arg(0))
	}
	version, commit := "unknown", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		var when, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = ", modified"
				}
			}
		}
		if commit != "" && (when != "" || modified != "") {
			commit = fmt.Sprintf("%s (%s%s)", commit, when, modified)
		}
	}
	if version == "" {
		version = "unknown"
	}
	fmt.Fprintf(stdout, "fencelock %s\n", version)
	fmt.Fprintf(stdout, "go        %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if commit != "" {
		fmt.Fprintf(stdout, "commit    %s\n", commit)
	}
	return exitcode.OK
}
