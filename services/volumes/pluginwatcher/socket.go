package pluginwatcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// socket is one socket file at one path, from when it is found until it is removed or
// replaced (ctx ends with errSocketGone) or the Watcher stops (ctx ends otherwise).
type socket struct {
	socketFile
	path string
	ctx  context.Context
	end  context.CancelCauseFunc
}

// removed reports whether the socket's file is gone, as opposed to the Watcher stopping.
func (s *socket) removed() bool {
	return errors.Is(context.Cause(s.ctx), errSocketGone)
}

// socketFile is what checkSocket learns of a socket file.
type socketFile struct {
	id fileID
	// bound is when the plugin created the socket (its modification time, set by bind).
	bound time.Time
}

// fileID tells one file from another at the same path. While a socket is tracked its
// inode stays in use, so a different file found at its path has a different fileID.
type fileID struct {
	dev, ino uint64
}

// checkSocket describes the file at path if it may be dialled as a plugin socket, and
// otherwise says why not: it must be a Unix socket itself, not a symbolic link to one; the
// directory holding it must resolve to a place inside the watched directory, so a
// directory swapped for a symbolic link cannot lead the Watcher elsewhere; and it must be
// owned by root, as the sockets of the node's privileged plugins are.
func (w *Watcher) checkSocket(path string) (socketFile, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return socketFile{}, err
	}
	switch mode := fi.Mode(); {
	case mode&fs.ModeSymlink != 0:
		return socketFile{}, errors.New("a symbolic link; a plugin must create its socket in the registration directory itself")
	case mode&fs.ModeSocket == 0:
		return socketFile{}, fmt.Errorf("not a unix socket (mode %v); only plugin sockets belong in the registration directory", mode)
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return socketFile{}, fmt.Errorf("resolve its directory: %w", err)
	}
	if !within(w.realDir, parent) {
		return socketFile{}, fmt.Errorf("its directory resolves to %s, outside the registration directory %s", parent, w.realDir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return socketFile{}, fmt.Errorf("no owner information for the socket (%T)", fi.Sys())
	}
	if st.Uid != 0 {
		return socketFile{}, fmt.Errorf("owned by uid %d, not root; a plugin's registration socket must be created by root", st.Uid)
	}
	return socketFile{id: fileID{dev: uint64(st.Dev), ino: st.Ino}, bound: fi.ModTime()}, nil
}

// within reports whether path is dir or lies under it; both are clean, as EvalSymlinks
// returns them.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
