package pgserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// EnvBin names the environment variable that, when set to a non-empty
// value, is the directory Find returns: it must hold initdb and postgres.
const EnvBin = "FENCELOCK_PG_BIN"

// InstallHint is the command that installs the PostgreSQL server on Debian
// and Ubuntu.
const InstallHint = "sudo apt-get install -y postgresql"

// ErrNotFound is wrapped by the error Find (and Start) returns when the
// PostgreSQL server binaries cannot be located.
var ErrNotFound = errors.New("pgserver: postgres binaries (initdb, postgres) not found")

// requiredBins must all be executables in the directory Find returns.
var requiredBins = []string{"initdb", "postgres"}

// versionedGlobs are searched, newest version first, when initdb is not on
// $PATH: Debian/Ubuntu's layout, then the PGDG RPMs'.
var versionedGlobs = []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"}

// Find returns the directory holding the PostgreSQL server binaries initdb
// and postgres. It uses $FENCELOCK_PG_BIN if that is set (and fails if that
// directory lacks either binary); else the directory of initdb found on
// $PATH (after resolving symlinks, so /usr/local/bin/initdb ->
// /usr/lib/postgresql/15/bin/initdb gives the latter); else the newest
// /usr/lib/postgresql/VERSION/bin (or /usr/pgsql-VERSION/bin) that holds
// both. The error wraps ErrNotFound and says how to install them.
func Find() (binDir string, err error) {
	if dir, ok := os.LookupEnv(EnvBin); ok && dir != "" {
		if err := hasBins(dir); err != nil {
			return "", fmt.Errorf("%w: $%s=%q: %v; fix the variable, or unset it and install PostgreSQL (%s on Debian/Ubuntu)",
				ErrNotFound, EnvBin, dir, err, InstallHint)
		}
		return dir, nil
	}
	if path, err := exec.LookPath("initdb"); err == nil {
		candidates := []string{filepath.Dir(path)}
		if real, err := filepath.EvalSymlinks(path); err == nil {
			candidates = append([]string{filepath.Dir(real)}, candidates...)
		}
		for _, dir := range candidates {
			if hasBins(dir) == nil {
				return absDir(dir), nil
			}
		}
	}
	for _, glob := range versionedGlobs {
		dirs, _ := filepath.Glob(glob)
		slices.SortFunc(dirs, func(a, b string) int { return compareVersions(b, a) })
		for _, dir := range dirs {
			if hasBins(dir) == nil {
				return dir, nil
			}
		}
	}
	return "", fmt.Errorf("%w in $PATH, /usr/lib/postgresql/*/bin or /usr/pgsql-*/bin; install PostgreSQL (%s on Debian/Ubuntu) or set $%s to the directory holding initdb and postgres",
		ErrNotFound, InstallHint, EnvBin)
}

// hasBins reports (as nil) whether dir holds every required executable.
func hasBins(dir string) error {
	for _, name := range requiredBins {
		if _, err := exec.LookPath(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("no %s executable in %s", name, dir)
		}
	}
	return nil
}

func absDir(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}

// compareVersions compares the version embedded in two paths such as
// /usr/lib/postgresql/9.6/bin and /usr/lib/postgresql/15/bin numerically,
// component by component; non-numeric text compares as strings.
func compareVersions(a, b string) int {
	fa, fb := versionFields(a), versionFields(b)
	for i := 0; i < len(fa) && i < len(fb); i++ {
		na, errA := strconv.Atoi(fa[i])
		nb, errB := strconv.Atoi(fb[i])
		var c int
		if errA == nil && errB == nil {
			c = na - nb
		} else {
			c = strings.Compare(fa[i], fb[i])
		}
		if c != 0 {
			return c
		}
	}
	return len(fa) - len(fb)
}

// versionFields splits a path into runs of digits and of other characters.
func versionFields(s string) []string {
	var fields []string
	start := 0
	for i := 1; i <= len(s); i++ {
		if i == len(s) || isDigit(s[i]) != isDigit(s[i-1]) {
			fields = append(fields, s[start:i])
			start = i
		}
	}
	return fields
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
