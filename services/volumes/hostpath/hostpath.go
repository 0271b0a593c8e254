// Package hostpath checks a hostPath volume's path against the volume's type before a pod
// uses it, creating the path for the *OrCreate types, with the kubelet's messages.
package hostpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	corev1 "k8s.io/api/core/v1"
)

// Modes of what DirectoryOrCreate and FileOrCreate make, as the kubelet makes them.
const (
	createdDirMode  fs.FileMode = 0o755
	createdFileMode fs.FileMode = 0o644
)

// Check verifies that path is what t asks for. A nil or empty type checks nothing.
// DirectoryOrCreate makes the directory and its parents (0755) when path does not exist;
// FileOrCreate makes an empty file (0644) when it does not exist, in a parent directory
// that must already exist. Symbolic links are followed, as the kubelet follows them.
func Check(path string, t *corev1.HostPathType) error {
	if t == nil {
		return nil
	}
	switch *t {
	case corev1.HostPathUnset:
		return nil
	case corev1.HostPathDirectoryOrCreate:
		if err := createIfMissing(path, func() error { return os.MkdirAll(path, createdDirMode) }); err != nil {
			return err
		}
		return expect(path, fs.ModeDir, "a directory")
	case corev1.HostPathDirectory:
		return expect(path, fs.ModeDir, "a directory")
	case corev1.HostPathFileOrCreate:
		if err := createIfMissing(path, func() error { return makeFile(path) }); err != nil {
			return err
		}
		return expect(path, 0, "a file")
	case corev1.HostPathFile:
		return expect(path, 0, "a file")
	case corev1.HostPathSocket:
		return expect(path, fs.ModeSocket, "a socket file")
	case corev1.HostPathCharDev:
		return expect(path, fs.ModeDevice|fs.ModeCharDevice, "a character device")
	case corev1.HostPathBlockDev:
		return expect(path, fs.ModeDevice, "a block device")
	default:
		return fmt.Errorf("%s is an invalid volume type", *t)
	}
}

// createIfMissing runs create when path does not exist. The caller checks the type
// afterwards either way, so a path that appeared meanwhile is still checked.
func createIfMissing(path string, create func() error) error {
	_, err := os.Stat(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := create(); err != nil {
		return fmt.Errorf("hostPath type check failed: create %s: %w", path, err)
	}
	return nil
}

// makeFile creates an empty file without creating its parents. It neither truncates a
// file that appeared meanwhile nor creates the target of a dangling symbolic link
// (O_EXCL); an existing path is left for the type check to judge.
func makeFile(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, createdFileMode)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// expect checks that path's type bits are exactly typ (0 for a regular file). A path that
// cannot be stat'ed (missing, no permission) is reported as not being of the type, with the
// reason wrapped.
func expect(path string, typ fs.FileMode, what string) error {
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("hostPath type check failed: %s is not %s: %w", path, what, err)
	}
	if info.Mode().Type() != typ {
		return fmt.Errorf("hostPath type check failed: %s is not %s", path, what)
	}
	return nil
}
