// Package cgroups creates, updates, lists and removes the node's QoS and pod cgroups
// (kubepods, kubepods/burstable, kubepods/besteffort, …/pod<uid>) as the kubelet's
// container manager does, and computes what they are given the way the kubelet does
// (PodResources is ResourceConfigForPod, AllocatableResources the node-allocatable
// cgroup's config, with MilliCPUToShares, MilliCPUToQuota and SharesToWeight).
//
// A cgroup is named in a driver-neutral form, Name, and each driver lays it out its way:
//
//   - cgroupfs: plain directories below the mount point, "/kubepods/burstable/pod<uid>".
//     On cgroup v1 a cgroup is made in every mounted hierarchy, as runc does, and a new
//     cpuset cgroup is given its parent's CPUs and memory nodes so that a process can run
//     in it. On cgroup v2 each ancestor, from the root down, has the controllers the node
//     uses (cpu, memory, pids, cpuset, hugetlb, io, where present) enabled in its
//     cgroup.subtree_control. Limits are written to the controllers' files.
//   - systemd: each cgroup is a transient slice unit, "kubepods-burstable-pod<uid>.slice",
//     whose parent slices systemd makes from the name. The driver talks to systemd over
//     D-Bus (its private socket, else the system bus), starts a missing slice with the
//     limits as unit properties, and sets the properties of one that is there.
//
// Remove never kills: it refuses with ErrNotEmpty while a process or a child cgroup is
// in the cgroup (with systemd the check reads the cgroup files before StopUnit, since
// stopping a slice would stop whatever runs in it). Kill is the separate step the kubelet
// takes before it destroys a pod's cgroup: SIGKILL to every process in it and below it,
// through cgroup.kill on cgroup v2 where it can, else pid by pid, each pid only through a
// pidfd taken while the cgroup still lists it. Stopping a pod's containers stays the
// caller's part, done through the runtime; Kill is for what is left after. Nothing here
// moves a process.
//
// Left out, and why:
//
//   - qosReserved memory reservations on the QoS tiers (the alpha QOSReserved gate) and
//     MemoryQoS's memory.min/memory.low: both off by default in the kubelet, and unitlet
//     does not offer them.
//   - cpusets for the static CPU manager policy: unitlet has no CPU manager (a
//     cpuManagerPolicy other than "none" is refused at load), so a pod's cgroup
//     keeps all of its parent's CPUs; Resources has no cpuset.
//   - hugetlb limits where systemd leaves no writable hugetlb files: systemd has no
//     property for them and does not give a slice the hugetlb controller on cgroup v2. The
//     systemd driver writes the limits into the slice's cgroup when it has the controller
//     (on v1 it makes the slice's directory in the hugetlb hierarchy), and otherwise
//     leaves them unset without an error; hugepages are then accounted by the scheduler
//     but not enforced by the pod's cgroup.
package cgroups
