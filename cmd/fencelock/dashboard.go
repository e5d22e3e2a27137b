package main

import (
	"fmt"
	"io"

	"github.com/fencelock/fencelock/internal/exitcode"
)

// runDashboard implements "fencelock dashboard" (being written: issue 12's
// live dashboard).
func runDashboard(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "fencelock dashboard: not implemented yet")
	return exitcode.CouldNotRun
}
