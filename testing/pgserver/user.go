package pgserver

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// EnvUser names the environment variable that, when set, is the system user
// initdb and postgres run as when this process runs as root (they refuse to
// run as root). It defaults to "postgres", the user the distribution
// packages create.
const EnvUser = "FENCELOCK_PG_USER"

const defaultUser = "postgres"

// identity is who initdb and postgres run as.
type identity struct {
	cred     *syscall.Credential // nil: as this process
	uid, gid int
	name     string // for messages
}

// serverIdentity returns this process's identity, or, when it runs as root,
// that of $FENCELOCK_PG_USER (default postgres).
func serverIdentity() (identity, error) {
	if euid := os.Geteuid(); euid != 0 {
		return identity{uid: euid, gid: os.Getegid(), name: "uid " + strconv.Itoa(euid)}, nil
	}
	name := os.Getenv(EnvUser)
	if name == "" {
		name = defaultUser
	}
	u, err := user.Lookup(name)
	if err != nil {
		return identity{}, fmt.Errorf("pgserver: running as root, which initdb and postgres refuse, so they would run as user %q, but: %v; create that user (the postgresql package does) or set $%s to another non-root user",
			name, err, EnvUser)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return identity{}, fmt.Errorf("pgserver: user %q: unexpected ids: %w", name, err)
	}
	if uid == 0 {
		return identity{}, fmt.Errorf("pgserver: user %q (from $%s) is root; initdb and postgres refuse to run as root", name, EnvUser)
	}
	return identity{
		// With Groups empty the child's supplementary groups are dropped.
		cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
		uid:  uid,
		gid:  gid,
		name: "user " + name,
	}, nil
}

// maxSocketPath is the longest Unix-domain socket path postgres accepts
// (sizeof(sun_path) - 1).
const maxSocketPath = 107

// socketSuffixLen bounds what follows the base directory in a socket path:
// "/" + dirPrefix + the up to 10 random digits of os.MkdirTemp +
// "/.s.PGSQL.65535".
var socketSuffixLen = 1 + len(dirPrefix) + 10 + len("/.s.PGSQL.65535")

// baseDir returns the directory in which Start creates its private
// directories: os.TempDir(), or /tmp if the former is too long for a socket
// path or not searchable by id.
func baseDir(id identity) (string, error) {
	candidates := []string{os.TempDir()}
	if candidates[0] != "/tmp" {
		candidates = append(candidates, "/tmp")
	}
	var problems []error
	for _, dir := range candidates {
		abs, err := filepath.Abs(dir)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if len(abs)+socketSuffixLen > maxSocketPath {
			problems = append(problems, fmt.Errorf("%s is too long a path for a Unix-domain socket in a subdirectory", abs))
			continue
		}
		if err := searchable(abs, id); err != nil {
			problems = append(problems, err)
			continue
		}
		return abs, nil
	}
	return "", fmt.Errorf("pgserver: no usable temporary directory: %w", errors.Join(problems...))
}

// searchable checks that id may search (traverse) dir and each of its
// parents, judging by the permission bits (ACLs are ignored).
func searchable(dir string, id identity) error {
	if id.cred == nil {
		return nil // we run postgres as ourselves
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if !canSearch(fi, id) {
			return fmt.Errorf("%s cannot enter %s (mode %v)", id.name, d, fi.Mode().Perm())
		}
		if parent := filepath.Dir(d); parent == d {
			return nil
		}
	}
}

func canSearch(fi os.FileInfo, id identity) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true // cannot tell; let postgres find out
	}
	perm := fi.Mode().Perm()
	switch {
	case int(st.Uid) == id.uid:
		return perm&0o100 != 0
	case int(st.Gid) == id.gid:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}
