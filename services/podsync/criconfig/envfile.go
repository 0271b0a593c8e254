package criconfig

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// fileKeyValue is the value of env[].valueFrom.fileKeyRef, as the kubelet reads it: key's
// value in the environment file at path inside the pod's emptyDir volume (written by an
// init container, say), the file opened without leaving the volume. ok is false for an
// optional key the file lacks.
func fileKeyValue(pod *corev1.Pod, ref *corev1.FileKeySelector, podsDir string) (string, bool, error) {
	i := -1
	for j, v := range pod.Spec.Volumes {
		if v.Name == ref.VolumeName {
			i = j
		}
	}
	if i < 0 {
		return "", false, fmt.Errorf("cannot find the volume %q referenced by FileKeyRef", ref.VolumeName)
	}
	if pod.Spec.Volumes[i].EmptyDir == nil {
		return "", false, fmt.Errorf("the volume %q referenced by FileKeyRef is not an emptyDir", ref.VolumeName)
	}
	if podsDir == "" {
		return "", false, errors.New("fileKeyRef: this node has no pods directory to read volumes from")
	}
	dir := filepath.Join(podsDir, string(pod.UID), "volumes", "kubernetes.io~empty-dir", ref.VolumeName)
	f, err := openInRoot(dir, ref.Path)
	if err != nil {
		return "", false, fmt.Errorf("couldn't parse env file: %w", err)
	}
	defer f.Close()
	v, found, err := parseEnvFile(f, ref.Key)
	if err != nil {
		return "", false, fmt.Errorf("couldn't parse env file %s of volume %q: %w", ref.Path, ref.VolumeName, err)
	}
	if !found || v == "" {
		if ref.Optional != nil && *ref.Optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("environment variable key %q not found in file %q of volume %q", ref.Key, ref.Path, ref.VolumeName)
	}
	return v, true, nil
}

// openInRoot opens path inside dir for reading, its symbolic links and ".." resolved as if
// dir were the root: a container cannot point it outside its volume. openat2's
// RESOLVE_IN_ROOT does it in the kernel; where a seccomp filter refuses openat2 (ENOSYS from
// systemd-nspawn's, EPERM from a unit's SystemCallFilter), the path is resolved inside dir as the kubelet
// resolves it (filepath-securejoin) and opened without following a last symbolic link.
func openInRoot(dir, path string) (*os.File, error) {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, path, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		return openJoined(dir, path)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Join(dir, path), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, path)), nil
}

// openJoined is openInRoot without openat2.
func openJoined(dir, path string) (*os.File, error) {
	joined, err := securejoin.SecureJoin(dir, path)
	if err != nil {
		return nil, err
	}
	return os.OpenFile(joined, os.O_RDONLY|unix.O_NOFOLLOW, 0)
}

// parseEnvFile finds key in an environment file of the kubelet's strict format: lines
// NAME='value' (the value taken literally, newlines included, up to the closing quote,
// which a comment may follow); blank lines and lines starting with # are skipped; no
// space before '='; a space right after it assigns the empty string. found is false when
// the file does not define key.
func parseEnvFile(r io.Reader, key string) (value string, found bool, err error) {
	sc := bufio.NewScanner(r)
	line := 0
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		line++
		return sc.Text(), true
	}
	for {
		text, ok := next()
		if !ok {
			break
		}
		text = strings.TrimLeft(text, " \t")
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, rest, hasEq := strings.Cut(text, "=")
		switch {
		case !hasEq:
			return "", false, fmt.Errorf("line %d: missing '='", line)
		case strings.TrimRight(name, " \t") == "":
			return "", false, fmt.Errorf("line %d: empty variable name", line)
		case strings.TrimRight(name, " \t") != name:
			return "", false, fmt.Errorf("line %d: whitespace before '=' is not allowed", line)
		}
		if trimmed := strings.TrimLeft(rest, " \t"); trimmed != rest {
			// NAME= 'x' assigns the empty string, as a shell does.
			if name == key {
				return "", true, nil
			}
			continue
		}
		if !strings.HasPrefix(rest, "'") {
			return "", false, fmt.Errorf("line %d: value must be enclosed in single quotes", line)
		}
		start := line
		rest = rest[1:]
		var b strings.Builder
		for {
			end := strings.IndexByte(rest, '\'')
			if end >= 0 {
				b.WriteString(rest[:end])
				if after := strings.TrimLeft(rest[end+1:], " \t"); after != "" && !strings.HasPrefix(after, "#") {
					return "", false, fmt.Errorf("line %d: unexpected content after closing quote", line)
				}
				break
			}
			b.WriteString(rest)
			b.WriteByte('\n')
			if rest, ok = next(); !ok {
				return "", false, fmt.Errorf("line %d: unclosed single quote", start)
			}
		}
		if name == key {
			return b.String(), true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", false, err
	}
	return "", false, nil
}
