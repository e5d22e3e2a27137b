package pgserver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A server's private directory is about 40 MB, too much to leak when a test
// binary is killed before it can call Close (Pdeathsig stops the postgres,
// but nothing removes its files). So each directory holds an owner lock: a
// file that the owning process keeps open and flock'ed until Close, and
// that the kernel unlocks when the process dies. Start removes directories
// whose lock it can take: their owner is gone.

const (
	// dirPrefix starts the name of every private directory.
	dirPrefix = "fencelock-pgserver-"
	// lockName is the owner lock file in a private directory.
	lockName = "owner.lock"
	// unlockedGrace is how old a private directory without a lock file
	// must be to count as abandoned: the owner creates the (locked) lock
	// file right after the directory, and a reaper may have died halfway
	// through removing one.
	unlockedGrace = 10 * time.Minute
)

var (
	reapMu     sync.Mutex
	reapedBase = map[string]bool{} // base directories reaped by this process
)

// reapOnce calls reapStale on base the first time this process uses it.
func reapOnce(base string) {
	reapMu.Lock()
	defer reapMu.Unlock()
	if !reapedBase[base] {
		reapedBase[base] = true
		reapStale(base, time.Now())
	}
}

// reapStale removes the private directories in base whose owner has died.
// It ignores every error: a directory it cannot lock or remove is left.
func reapStale(base string, now time.Time) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), dirPrefix) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		f, err := os.Open(filepath.Join(dir, lockName))
		if errors.Is(err, fs.ErrNotExist) {
			if fi, err := os.Lstat(dir); err == nil && now.Sub(fi.ModTime()) > unlockedGrace {
				os.RemoveAll(dir)
			}
			continue
		}
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.RemoveAll(dir) // still holding the lock, so no one else reaps it
		}
		f.Close()
	}
}

// lockDir creates dir's owner lock file, already locked: it is locked under
// a temporary name and then renamed, so a reaper never sees it unlocked.
// The file must stay open until the directory is removed.
func lockDir(dir string) (*os.File, error) {
	tmp := filepath.Join(dir, lockName+".new")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgserver: creating owner lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("pgserver: locking %s: %w", tmp, err)
	}
	fmt.Fprintf(f, "pid %d\n", os.Getpid())
	if err := os.Rename(tmp, filepath.Join(dir, lockName)); err != nil {
		f.Close()
		return nil, fmt.Errorf("pgserver: creating owner lock: %w", err)
	}
	return f, nil
}
