package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockFile is the name of the single-instance lock in the root dir.
const LockFile = "unitlet-config.lock"

// ErrLocked says another unitlet-config runs on this node.
var ErrLocked = errors.New("another unitlet-config is running")

// Lock takes the node's single-instance lock, an flock on <rootDir>/unitlet-config.lock
// holding the owner's pid. The lock lasts until the returned file is closed or the process
// ends, so a crash never leaves it behind.
func Lock(rootDir string) (*os.File, error) {
	if err := os.MkdirAll(rootDir, 0o755); err != nil {
		return nil, fmt.Errorf("create the root dir: %w", err)
	}
	path := filepath.Join(rootDir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open the lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			owner := "unknown pid"
			if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
				owner = "pid " + strings.TrimSpace(string(b))
			}
			return nil, fmt.Errorf("%w (%s holds %s); stop it first, or give this one another --root-dir", ErrLocked, owner, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
