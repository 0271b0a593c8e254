// Package cgroupfile reads the files of the cgroup filesystem (and of /proc) that hold
// numbers: one number (memory.current, cpuacct.usage) or a "key value" per line
// (memory.stat, cpu.stat, /proc/vmstat).
package cgroupfile

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Number is what a file's numbers are read as.
type Number interface {
	~int64 | ~uint64 | ~float64
}

func parse[T Number](s string) (T, error) {
	var zero T
	switch any(zero).(type) {
	case int64:
		v, err := strconv.ParseInt(s, 10, 64)
		return T(v), err
	case uint64:
		v, err := strconv.ParseUint(s, 10, 64)
		return T(v), err
	default:
		v, err := strconv.ParseFloat(s, 64)
		return T(v), err
	}
}

// Read reads a file holding one number. A missing file's error satisfies
// errors.Is(err, fs.ErrNotExist); one that does not parse names the file.
func Read[T Number](path string) (T, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := parse[T](string(bytes.TrimSpace(b)))
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}

// KeyValues reads "key value" lines; a line whose value is not a number of T is left out.
func KeyValues[T Number](path string) (map[string]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	kv := map[string]T{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), " ")
		if !ok {
			continue
		}
		if n, err := parse[T](strings.TrimSpace(v)); err == nil {
			kv[k] = n
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return kv, nil
}
