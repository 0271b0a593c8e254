package containerlogs

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

const (
	// stampLayout is the time in a rotated file's name, <log>.<stamp>, as the kubelet's.
	stampLayout = "20060102-150405"
	gzSuffix    = ".gz"
	// tmpSuffix marks a file being compressed: one left over is from a rotation cut short.
	tmpSuffix = ".tmp"
)

// rotatedFiles are the rotated files of the log at path, oldest first, after removing the
// leftovers of a rotation cut short: temporary files, and uncompressed files whose
// compressed copy was completed.
func rotatedFiles(path string) ([]string, error) {
	all, err := filepath.Glob(path + ".*")
	if err != nil {
		return nil, fmt.Errorf("list the rotated files of %s: %w", path, err)
	}
	var kept []string
	for _, f := range all {
		if strings.HasSuffix(f, tmpSuffix) || (!strings.HasSuffix(f, gzSuffix) && slices.Contains(all, f+gzSuffix)) {
			if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("remove the leftover %s: %w", f, err)
			}
			continue
		}
		kept = append(kept, f)
	}
	// The stamps sort as their times.
	slices.Sort(kept)
	return kept, nil
}

// prepareRotation makes room for one more rotated file of the log at path: it keeps the
// newest maxFiles-2 rotated files (the live log and the file about to be rotated make
// maxFiles), removing the oldest first so a reader of the newer ones is not cut off, and
// compresses the kept ones that are not yet.
func prepareRotation(path string, maxFiles int) error {
	rotated, err := rotatedFiles(path)
	if err != nil {
		return err
	}
	excess := max(len(rotated)-max(maxFiles-2, 0), 0)
	for _, f := range rotated[:excess] {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the old log %s: %w", f, err)
		}
	}
	for _, f := range rotated[excess:] {
		if strings.HasSuffix(f, gzSuffix) {
			continue
		}
		if err := compress(f); err != nil {
			return err
		}
	}
	return nil
}

// compress replaces the file at path by path.gz (gzip), written to a temporary file first
// so that a .gz file is always whole.
func compress(path string) (err error) {
	in, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	tmp := path + tmpSuffix
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, info.Mode().Perm())
	if err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	defer func() {
		out.Close()
		if err != nil {
			os.Remove(tmp)
		}
	}()
	zw := gzip.NewWriter(out)
	if _, err := io.Copy(zw, in); err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	if err := os.Rename(tmp, path+gzSuffix); err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove %s after compressing it: %w", path, err)
	}
	return nil
}

// rotateLive renames the live log at path to path.<stamp of now> and has the runtime
// reopen it (a new file at path). When the runtime cannot, the file is renamed back, so
// the next check tries again. It returns the rotated file's name.
func rotateLive(path string, now time.Time, reopen func() error) (string, error) {
	rotated := path + "." + now.Format(stampLayout)
	if err := os.Rename(path, rotated); err != nil {
		return "", fmt.Errorf("rotate %s: %w", path, err)
	}
	if err := reopen(); err != nil {
		if back := os.Rename(rotated, path); back != nil {
			return "", fmt.Errorf("reopen %s: %w; and renaming %s back failed: %w", path, err, rotated, back)
		}
		return "", fmt.Errorf("reopen %s: %w", path, err)
	}
	return rotated, nil
}

// removeFiles removes the log at path and all its rotated files.
func removeFiles(path string) error {
	files, err := filepath.Glob(path + "*")
	if err != nil {
		return fmt.Errorf("list the log files of %s: %w", path, err)
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the log file %s: %w", f, err)
		}
	}
	return nil
}
