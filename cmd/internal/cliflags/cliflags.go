// Package cliflags prints flag sets the way every fencelock command does
// (cmd/fencelock and the demo, which etcdbackend's etcddemo shares).
package cliflags

import (
	"flag"
	"fmt"
	"io"
)

// Print lists fs's flags with GNU-style double dashes (the flag package
// accepts both), each with its usage and any non-zero default.
func Print(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(w, "%s\n      %s", line, usage)
		switch {
		case f.DefValue == "" || f.DefValue == "0" || f.DefValue == "false":
		case name == "string":
			fmt.Fprintf(w, " (default %q)", f.DefValue)
		default:
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}
