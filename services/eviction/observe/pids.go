package observe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/unitlet/unitlet/shared/cgroupfile"
)

// pids is pid.available: the lower of kernel.pid_max and kernel.threads-max, less the tasks
// the kernel has (the number after "/" in loadavg; sysinfo's count when loadavg cannot be
// read on the real /proc). Either limit file alone is enough, as for the kubelet.
func (s *Source) pids() (Value, error) {
	var limit int64 = -1
	var errs []error
	for _, name := range []string{"pid_max", "threads-max"} {
		n, err := cgroupfile.Read[int64](filepath.Join(s.procRoot, "sys", "kernel", name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if limit < 0 || n < limit {
			limit = n
		}
	}
	if limit < 0 {
		return Value{}, errors.Join(errs...)
	}
	tasks, err := s.taskCount()
	if err != nil {
		return Value{}, err
	}
	return Value{Available: limit - tasks, Capacity: limit}, nil
}

// taskCount reads how many tasks (threads) exist from loadavg ("0.10 0.20 0.30 2/345 6789":
// 345). The kernel's sysinfo is the fallback on the real /proc: it can truncate past 65535.
func (s *Source) taskCount() (int64, error) {
	p := filepath.Join(s.procRoot, "loadavg")
	b, err := os.ReadFile(p)
	if err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 4 {
			if _, total, ok := strings.Cut(f[3], "/"); ok {
				if n, perr := strconv.ParseInt(total, 10, 64); perr == nil {
					return n, nil
				}
			}
		}
		err = fmt.Errorf("read %s: unexpected content %q", p, strings.TrimSpace(string(b)))
	}
	if filepath.Clean(s.procRoot) != "/proc" {
		return 0, err
	}
	var info unix.Sysinfo_t
	if serr := unix.Sysinfo(&info); serr != nil {
		return 0, errors.Join(err, fmt.Errorf("sysinfo: %w", serr))
	}
	return int64(info.Procs), nil
}
