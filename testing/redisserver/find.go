// Package redisserver starts, stops, pauses and kills throwaway real
// redis-server processes for tests and the demo.
//
// Every server runs on a loopback port with persistence disabled, in its own
// private temporary directory and its own process group. The package is
// Unix-only: it relies on process groups and job-control signals.
//
// It is the test harness of fencelock's own modules (the library, cmd,
// etcdbackend, fencelockprom), public so that each of them can use it; it
// is not part of the library's API, and no library package imports it.
package redisserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// EnvServerPath names the environment variable that, when set to a non-empty
// value, overrides where Find looks for the redis-server binary.
const EnvServerPath = "FENCELOCK_REDIS_SERVER"

// InstallHint is the command that installs redis-server on Debian and Ubuntu.
const InstallHint = "sudo apt-get install -y redis-server"

// ErrNotFound is wrapped by the error Find (and Start) returns when no
// redis-server binary can be located.
var ErrNotFound = errors.New("redisserver: redis-server not found")

// fallbackDirs are searched, in order, when redis-server is not on $PATH.
var fallbackDirs = []string{"/usr/bin", "/usr/local/bin", "/usr/sbin"}

// Find locates the redis-server binary. It uses $FENCELOCK_REDIS_SERVER if
// that is set (and fails if it does not name an executable), else
// exec.LookPath("redis-server"), else the first executable redis-server in
// /usr/bin, /usr/local/bin or /usr/sbin. The error wraps ErrNotFound and says
// how to install redis-server.
func Find() (string, error) {
	if p, ok := os.LookupEnv(EnvServerPath); ok && p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("%w: $%s=%q is not an executable (%v); fix the variable, or unset it and install redis-server (%s on Debian/Ubuntu)",
				ErrNotFound, EnvServerPath, p, err, InstallHint)
		}
		return path, nil
	}
	if path, err := exec.LookPath("redis-server"); err == nil {
		return path, nil
	}
	for _, dir := range fallbackDirs {
		if path, err := exec.LookPath(filepath.Join(dir, "redis-server")); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("%w in $PATH, /usr/bin, /usr/local/bin or /usr/sbin; install it (%s on Debian/Ubuntu) or set $%s to its path",
		ErrNotFound, InstallHint, EnvServerPath)
}
