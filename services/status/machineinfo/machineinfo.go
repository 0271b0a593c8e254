// Package machineinfo reads what /metrics/cadvisor says of the machine (machine_cpu_cores,
// machine_memory_bytes and their boot_id, machine_id and system_uuid labels): the fields of
// cAdvisor's MachineInfo those series carry, read from /proc, /sys and /etc as cAdvisor
// reads them. The node API serves no machine description of its own: the v1.36 kubelet has
// no /spec.
package machineinfo

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MachineInfo is the part of cAdvisor's MachineInfo the machine's metrics carry.
type MachineInfo struct {
	// NumCores is the number of online logical CPUs.
	NumCores int
	// MemoryCapacity is MemTotal, in bytes.
	MemoryCapacity uint64
	MachineID      string
	SystemUUID     string
	BootID         string
}

// Reader reads MachineInfo. Its roots are where procfs, sysfs and /etc are, for tests.
type Reader struct {
	Proc, Sys, Etc string
}

// Read reads the machine's description. What the machine does not have (a DMI UUID in a
// container) is left empty, as cAdvisor leaves it.
func (r Reader) Read() (*MachineInfo, error) {
	m := &MachineInfo{}
	meminfo, err := readMeminfo(filepath.Join(r.Proc, "meminfo"))
	if err != nil {
		return nil, err
	}
	m.MemoryCapacity = meminfo["MemTotal"]
	online, err := parseCPUList(firstLine(filepath.Join(r.Sys, "devices/system/cpu/online")))
	if err != nil {
		return nil, fmt.Errorf("read the online cpus: %w", err)
	}
	m.NumCores = len(online)
	m.MachineID = firstLine(filepath.Join(r.Etc, "machine-id"))
	m.SystemUUID = firstLine(filepath.Join(r.Sys, "class/dmi/id/product_uuid"))
	m.BootID = firstLine(filepath.Join(r.Proc, "sys/kernel/random/boot_id"))
	return m, nil
}

// readMeminfo reads a meminfo file ("Key: value kB") into bytes by key.
func readMeminfo(path string) (map[string]uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(data), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(key)
		v := strings.Fields(val)
		if len(fields) == 0 || len(v) == 0 {
			continue
		}
		n, err := strconv.ParseUint(v[0], 10, 64)
		if err != nil {
			continue
		}
		if len(v) > 1 && v[1] == "kB" {
			n *= 1024
		}
		out[fields[len(fields)-1]] = n
	}
	return out, nil
}

// parseCPUList reads a kernel CPU list ("0-3,6,8-9").
func parseCPUList(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("bad cpu list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad cpu list %q", s)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

// firstLine is a file's first line, trimmed; empty when it cannot be read.
func firstLine(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(data), "\n")
	return strings.TrimSpace(line)
}
