//go:build !linux

package nodeinfo

import "errors"

// filesystemSize is only implemented on Linux, the one platform unitlet runs on.
func filesystemSize(string) (int64, error) {
	return 0, errors.New("filesystem size: only supported on linux")
}
