// Package observe measures the node for eviction the way the kubelet's eviction manager
// sees it through its stats providers: the nine eviction signals (Node), what each pod uses
// (Pods), and a prompt notice when memory runs short (MemoryNotifier). It reads cgroup v1
// or v2, either cgroup driver, /proc, the node's file systems and the container runtime over
// CRI; it decides nothing.
//
// The signals, each as the kubelet computes it (pkg/kubelet/eviction makeSignalObservations
// over the summary built by pkg/kubelet/stats and cadvisor):
//
//   - memory.available: capacity is MemTotal from /proc/meminfo (cadvisor's machine memory
//     capacity, the root container's limit); available is capacity less the root cgroup's
//     working set. The working set is usage less inactive file pages (cadvisor
//     setMemoryStats). Usage is memory.usage_in_bytes of the v1 memory hierarchy's root
//     with total_inactive_file from its memory.stat; on cgroup v2 it is memory.current where
//     the mount's root has one (a cgroup namespace) and otherwise, on the real root, anon +
//     file from the root memory.stat (runc's rootStatsFromMeminfo), with inactive_file.
//   - allocatableMemory.available: the same arithmetic on the node-allocatable cgroup
//     (kubepods under cgroupRoot), with the cgroup's memory limit as capacity, as the
//     kubelet's "pods" system container. Without a limit on that cgroup Options'
//     AllocatableMemory is the capacity; without either the signal is left out.
//   - nodefs.available and nodefs.inodesFree: statfs of RootDir (cadvisor's vfs stats):
//     capacity f_frsize*f_blocks, available f_frsize*f_bavail, inodes f_files, free f_ffree.
//   - imagefs.*: the same statfs of the mount point the runtime names for its first image
//     file system (CRI ImageFsInfo).
//   - containerfs.*: the runtime's first container file system when it lies on another
//     device than the image file system; otherwise the image file system's numbers, as the
//     kubelet reports them.
//   - pid.available: capacity is the lower of kernel.pid_max and kernel.threads-max; what
//     is used is the number of tasks after the "/" in /proc/loadavg, or sysinfo's procs
//     when /proc/loadavg cannot be read (pkg/kubelet/stats/pidlimit).
//
// Pods are those with running containers, grouped by the io.kubernetes.pod.* labels. A
// container's working set and writable layer come from CRI ListContainerStats; its log
// usage is every file in /var/log/pods/<namespace>_<name>_<uid>/<container>/. A pod's
// memory is its pod cgroup's working set (the sum of its containers' when the cgroup is not
// found). Its processes are the pod cgroup's pids.current: every task of the pod, threads
// and the sandbox included, which is what pid.available counts and podPidsLimit limits
// (the kubelet's own count sums its containers' cgroup.procs lines, threads not counted).
// Volume, log and etc-hosts usage is measured like the kubelet's du: allocated blocks times
// 512, hard links once, without leaving the file system the measured directory is on.
package observe
