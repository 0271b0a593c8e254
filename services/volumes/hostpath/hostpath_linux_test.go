package hostpath

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

func mknodBlock(path string) error {
	return unix.Mknod(path, unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0)))
}

// umask reads the process's umask (setting it back at once), which shapes created modes.
func umask() fs.FileMode {
	old := unix.Umask(0)
	unix.Umask(old)
	return fs.FileMode(old)
}
