// Package machineinfo reads the node's machine description that the node API serves at
// /spec: cAdvisor's MachineInfo JSON (github.com/google/cadvisor/info/v1), as the kubelet
// served it from cAdvisor, read from /proc, /sys and /etc. The types restate the fields
// it fills under cAdvisor's JSON names, so as not to pull cAdvisor's module graph in.
package machineinfo

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// MachineInfo is cAdvisor's MachineInfo, the fields the node agent can know.
type MachineInfo struct {
	Timestamp        time.Time       `json:"timestamp"`
	CPUVendorID      string          `json:"vendor_id"`
	NumCores         int             `json:"num_cores"`
	NumPhysicalCores int             `json:"num_physical_cores"`
	NumSockets       int             `json:"num_sockets"`
	CPUFrequencyKHz  uint64          `json:"cpu_frequency_khz"`
	MemoryCapacity   uint64          `json:"memory_capacity"`
	SwapCapacity     uint64          `json:"swap_capacity"`
	HugePages        []HugePagesInfo `json:"hugepages"`
	MachineID        string          `json:"machine_id"`
	SystemUUID       string          `json:"system_uuid"`
	BootID           string          `json:"boot_id"`
	Filesystems      []FsInfo        `json:"filesystems"`
	Topology         []Node          `json:"topology"`
	CloudProvider    string          `json:"cloud_provider"`
	InstanceType     string          `json:"instance_type"`
	InstanceID       string          `json:"instance_id"`
}

// FsInfo is a filesystem: its device, size in bytes, type and inodes.
type FsInfo struct {
	Device    string `json:"device"`
	Capacity  uint64 `json:"capacity"`
	Type      string `json:"type"`
	Inodes    uint64 `json:"inodes"`
	HasInodes bool   `json:"has_inodes"`
}

// Node is a NUMA node: its memory in bytes, huge pages and cores.
type Node struct {
	ID        int             `json:"node_id"`
	Memory    uint64          `json:"memory"`
	HugePages []HugePagesInfo `json:"hugepages"`
	Cores     []Core          `json:"cores"`
}

// Core is a physical core and the logical CPUs (threads) on it.
type Core struct {
	ID       int   `json:"core_id"`
	Threads  []int `json:"thread_ids"`
	SocketID int   `json:"socket_id"`
}

// HugePagesInfo is a huge page size in KiB and how many pages of it there are.
type HugePagesInfo struct {
	PageSize uint64 `json:"page_size"`
	NumPages uint64 `json:"num_pages"`
}

// Reader reads MachineInfo. Its roots are where procfs, sysfs and /etc are, for tests.
type Reader struct {
	Proc, Sys, Etc string
	// RootDir is the node agent's root directory; its filesystem is listed.
	RootDir string
	Now     func() time.Time
}

// Read reads the machine's description. What the machine does not have (a DMI UUID in a
// container, cpufreq in a VM) is left empty, as cAdvisor leaves it.
func (r Reader) Read() (*MachineInfo, error) {
	m := &MachineInfo{Timestamp: r.Now(), CloudProvider: "Unknown", InstanceType: "Unknown", InstanceID: "None"}
	meminfo, err := readMeminfo(filepath.Join(r.Proc, "meminfo"))
	if err != nil {
		return nil, err
	}
	m.MemoryCapacity, m.SwapCapacity = meminfo["MemTotal"], meminfo["SwapTotal"]
	cpuinfo, err := os.ReadFile(filepath.Join(r.Proc, "cpuinfo"))
	if err != nil {
		return nil, fmt.Errorf("read cpu info: %w", err)
	}
	m.CPUVendorID = cpuinfoField(string(cpuinfo), "vendor_id")
	m.CPUFrequencyKHz = r.cpuFrequency(string(cpuinfo))
	if m.Topology, err = r.topology(); err != nil {
		return nil, err
	}
	cores, sockets := map[[2]int]bool{}, map[int]bool{}
	for _, n := range m.Topology {
		for _, c := range n.Cores {
			m.NumCores += len(c.Threads)
			cores[[2]int{c.SocketID, c.ID}] = true
			sockets[c.SocketID] = true
		}
	}
	m.NumPhysicalCores, m.NumSockets = len(cores), len(sockets)
	m.HugePages = hugePages(filepath.Join(r.Sys, "kernel/mm/hugepages"))
	m.MachineID = firstLine(filepath.Join(r.Etc, "machine-id"))
	m.SystemUUID = firstLine(filepath.Join(r.Sys, "class/dmi/id/product_uuid"))
	m.BootID = firstLine(filepath.Join(r.Proc, "sys/kernel/random/boot_id"))
	fs, err := r.filesystem()
	if err != nil {
		return nil, err
	}
	m.Filesystems = []FsInfo{fs}
	return m, nil
}

// cpuFrequency is cpu0's highest frequency from cpufreq, else the "cpu MHz" cpuinfo lists.
func (r Reader) cpuFrequency(cpuinfo string) uint64 {
	if v, err := strconv.ParseUint(firstLine(filepath.Join(r.Sys, "devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")), 10, 64); err == nil {
		return v
	}
	mhz, err := strconv.ParseFloat(cpuinfoField(cpuinfo, "cpu MHz"), 64)
	if err != nil {
		return 0
	}
	return uint64(mhz * 1000)
}

// topology groups the online CPUs by NUMA node and core; without NUMA in sysfs, one node 0
// holds them all with the machine's memory.
func (r Reader) topology() ([]Node, error) {
	cpuDir := filepath.Join(r.Sys, "devices/system/cpu")
	online, err := parseCPUList(firstLine(filepath.Join(cpuDir, "online")))
	if err != nil {
		return nil, fmt.Errorf("read the online cpus: %w", err)
	}
	nodeOf := map[int]int{}
	nodeDirs, _ := filepath.Glob(filepath.Join(r.Sys, "devices/system/node/node[0-9]*"))
	nodes := map[int]*Node{}
	for _, dir := range nodeDirs {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "node"))
		if err != nil {
			continue
		}
		n := &Node{ID: id, HugePages: hugePages(filepath.Join(dir, "hugepages"))}
		if mem, err := readMeminfo(filepath.Join(dir, "meminfo")); err == nil {
			n.Memory = mem["MemTotal"]
		}
		cpus, _ := parseCPUList(firstLine(filepath.Join(dir, "cpulist")))
		for _, c := range cpus {
			nodeOf[c] = id
		}
		nodes[id] = n
	}
	if len(nodes) == 0 {
		mem, err := readMeminfo(filepath.Join(r.Proc, "meminfo"))
		if err != nil {
			return nil, err
		}
		nodes[0] = &Node{ID: 0, Memory: mem["MemTotal"], HugePages: hugePages(filepath.Join(r.Sys, "kernel/mm/hugepages"))}
	}
	for _, cpu := range online {
		topo := filepath.Join(cpuDir, fmt.Sprintf("cpu%d", cpu), "topology")
		core, err := strconv.Atoi(firstLine(filepath.Join(topo, "core_id")))
		if err != nil {
			core = cpu
		}
		socket, err := strconv.Atoi(firstLine(filepath.Join(topo, "physical_package_id")))
		if err != nil {
			socket = 0
		}
		n := nodes[nodeOf[cpu]]
		if n == nil {
			continue
		}
		i := slices.IndexFunc(n.Cores, func(c Core) bool { return c.ID == core && c.SocketID == socket })
		if i < 0 {
			n.Cores = append(n.Cores, Core{ID: core, SocketID: socket})
			i = len(n.Cores) - 1
		}
		n.Cores[i].Threads = append(n.Cores[i].Threads, cpu)
	}
	out := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		slices.SortFunc(n.Cores, func(a, b Core) int { return a.Threads[0] - b.Threads[0] })
		out = append(out, *n)
	}
	slices.SortFunc(out, func(a, b Node) int { return a.ID - b.ID })
	return out, nil
}

// filesystem is the filesystem holding RootDir: its device from mountinfo, size and inodes.
func (r Reader) filesystem() (FsInfo, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(r.RootDir, &st); err != nil {
		return FsInfo{}, fmt.Errorf("statfs %s: %w", r.RootDir, err)
	}
	fs := FsInfo{Capacity: st.Blocks * uint64(st.Bsize), Inodes: st.Files, HasInodes: st.Files > 0}
	fs.Device, fs.Type = r.mountOf(r.RootDir)
	return fs, nil
}

// mountOf is the source and type of the mount holding path: the longest mount point
// that is path or a parent of it, in /proc/self/mountinfo.
func (r Reader) mountOf(path string) (device, fsType string) {
	f, err := os.Open(filepath.Join(r.Proc, "self/mountinfo"))
	if err != nil {
		return "", ""
	}
	defer f.Close()
	best := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 2 {
			continue
		}
		mp := fields[4]
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, fsType, device = mp, tail[0], tail[1]
		}
	}
	return device, fsType
}

// readMeminfo reads a meminfo file ("Key: value kB", or a NUMA node's "Node 0 Key: value
// kB") into bytes by key.
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

// hugePages lists the huge page sizes under dir (hugepages-<size>kB/nr_hugepages).
func hugePages(dir string) []HugePagesInfo {
	out := []HugePagesInfo{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		size, ok := strings.CutPrefix(e.Name(), "hugepages-")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(size, "kB"), 10, 64)
		if err != nil {
			continue
		}
		n, _ := strconv.ParseUint(firstLine(filepath.Join(dir, e.Name(), "nr_hugepages")), 10, 64)
		out = append(out, HugePagesInfo{PageSize: kb, NumPages: n})
	}
	return out
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

func cpuinfoField(cpuinfo, name string) string {
	for _, line := range strings.Split(cpuinfo, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
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
