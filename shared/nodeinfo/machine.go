// Package nodeinfo holds the node as the node agent sees it before, or without, the API
// server's Node object: the machine's capacity read from the host, and the Node built from
// it and the node configuration with the kubelet's allocatable arithmetic.
package nodeinfo

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Machine is the node's raw capacity as read from the host.
type Machine struct {
	// CPUMilli is the number of logical CPUs online, in millicores.
	CPUMilli int64
	// MemoryBytes is MemTotal from /proc/meminfo.
	MemoryBytes int64
	// SwapBytes is SwapTotal from /proc/meminfo: the node's swap capacity.
	SwapBytes int64
	// EphemeralStorageBytes is the size of the filesystem holding the root directory.
	EphemeralStorageBytes int64
	// HugePages maps a page size written as a quantity ("2Mi", "1Gi") to the bytes
	// held in pages of that size. Sizes the kernel supports but has no pages of are
	// present with 0, as the kubelet reports them.
	HugePages map[string]int64
	// MaxPIDs is how many processes the node can have: the lower of kernel.pid_max and
	// kernel.threads-max.
	MaxPIDs int64
}

// ReadMachine reads the CPU count (/proc/cpuinfo, or runtime.NumCPU when that lists no
// processor), MemTotal and huge pages (/sys/kernel/mm/hugepages, or /proc/meminfo's default
// size when sysfs has none), and the size of the filesystem holding rootDir.
func ReadMachine(rootDir string) (Machine, error) {
	return readMachine("/proc", "/sys", rootDir)
}

// readMachine is ReadMachine with the proc and sys mount points given, for tests.
func readMachine(procDir, sysDir, rootDir string) (Machine, error) {
	var m Machine
	cpus, err := countProcessors(filepath.Join(procDir, "cpuinfo"))
	if err != nil || cpus == 0 {
		cpus = runtime.NumCPU()
	}
	m.CPUMilli = int64(cpus) * 1000

	meminfoPath := filepath.Join(procDir, "meminfo")
	mi, err := readMeminfo(meminfoPath)
	if err != nil {
		return Machine{}, err
	}
	memTotal, ok := mi["MemTotal"]
	if !ok {
		return Machine{}, fmt.Errorf("read %s: no MemTotal line", meminfoPath)
	}
	m.MemoryBytes = memTotal
	m.SwapBytes = mi["SwapTotal"]

	m.HugePages, err = readHugePages(filepath.Join(sysDir, "kernel", "mm", "hugepages"), mi)
	if err != nil {
		return Machine{}, err
	}

	m.MaxPIDs, err = readMaxPIDs(filepath.Join(procDir, "sys", "kernel"))
	if err != nil {
		return Machine{}, err
	}

	m.EphemeralStorageBytes, err = filesystemSize(rootDir)
	if err != nil {
		return Machine{}, fmt.Errorf("statfs root dir %s: %w", rootDir, err)
	}
	return m, nil
}

// readMaxPIDs is the lower of pid_max and threads-max in dir (/proc/sys/kernel).
func readMaxPIDs(dir string) (int64, error) {
	var limit int64
	for _, name := range []string{"pid_max", "threads-max"} {
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", path, err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", path, err)
		}
		if limit == 0 || v < limit {
			limit = v
		}
	}
	return limit, nil
}

// countProcessors counts the "processor" entries of a cpuinfo file.
func countProcessors(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, _, found := strings.Cut(sc.Text(), ":")
		if found && strings.TrimSpace(key) == "processor" {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return n, nil
}

// readMeminfo returns the meminfo fields in bytes where the line carries "kB", and as plain
// counts (HugePages_Total) where it carries no unit.
func readMeminfo(path string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	out := make(map[string]int64)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, rest, found := strings.Cut(sc.Text(), ":")
		if !found {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read %s: field %s: %w", path, key, err)
		}
		if len(fields) > 1 {
			if fields[1] != "kB" {
				return nil, fmt.Errorf("read %s: field %s: unknown unit %q", path, key, fields[1])
			}
			v *= 1024
		}
		out[key] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

// readHugePages reads every page size the kernel offers from dir
// (hugepages-<size>kB/nr_hugepages); without that directory it falls back to the default
// size and total of meminfo.
func readHugePages(dir string, meminfo map[string]int64) (map[string]int64, error) {
	out := make(map[string]int64)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		size, total := meminfo["Hugepagesize"], meminfo["HugePages_Total"]
		if size > 0 {
			out[pageSizeKey(size)] = size * total
		}
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read huge pages %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		kb, ok := strings.CutPrefix(name, "hugepages-")
		if !ok {
			continue
		}
		kb, ok = strings.CutSuffix(kb, "kB")
		if !ok {
			return nil, fmt.Errorf("read huge pages %s: unexpected entry %s", dir, name)
		}
		sizeKB, err := strconv.ParseInt(kb, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read huge pages %s: entry %s: %w", dir, name, err)
		}
		p := filepath.Join(dir, name, "nr_hugepages")
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read huge pages %s: %w", p, err)
		}
		pages, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read huge pages %s: %w", p, err)
		}
		size := sizeKB * 1024
		out[pageSizeKey(size)] = size * pages
	}
	return out, nil
}

// pageSizeKey writes a page size in bytes the way the kubelet names it in the resource
// hugepages-<size>: a binary quantity such as "2Mi".
func pageSizeKey(bytes int64) string {
	return resource.NewQuantity(bytes, resource.BinarySI).String()
}
