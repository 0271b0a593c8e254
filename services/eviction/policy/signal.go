// Package policy is unitlet-eviction's decision logic, the kubelet eviction manager's
// rules without its I/O: it parses the eviction settings of a KubeletConfiguration,
// decides from observed signals which thresholds are crossed and met and which pressure
// conditions the node reports, ranks pods for eviction, writes the kubelet's eviction
// messages, gives the admission verdict, and finds pods over their local storage limits.
//
// Nothing here reads the node, sleeps or starts a goroutine: the service loop observes the
// signals, keeps the State (checkpointing it as JSON), and acts on what this package
// decides. The rules, reasons and message texts are the kubelet's (v1.36); where the
// kubelet depends on feature gates, the package follows their defaults in that release
// (PodLevelResources on, TaintTolerationComparisonOperators off).
//
// One round of the kubelet's eviction manager, every MonitoringPeriod, in these terms:
//
//  1. Once the filesystem layout is known, cfg = cfg.ForLayout(layout).
//  2. r := Evaluate(cfg, observations, &state, now); report r.Conditions, and judge new
//     pods with Admit(pod, r.ConditionList()).
//  3. With cfg.LocalStorageCapacityIsolation, evict every pod LocalStorageViolations
//     returns (grace period ImmediateGracePeriodSeconds, reason Reason, the violation's
//     message); if there was any, the round ends here.
//  4. If r.Actionable is empty, the round ends. Otherwise t := r.Actionable[0] is the
//     threshold to reclaim.
//  5. If NodeReclaim(t.Signal, layout) has anything to free, free it, observe again, and
//     if ReclaimedAll(cfg, newObservations) the round ends without eviction.
//  6. Evict the first pod of Rank(t.Signal, pods, layout), with GracePeriod(t, cfg, pod),
//     reason Reason and Message(t.Signal, t, observations[t.Signal], podStats): one pod
//     a round. The kubelet then waits (up to 30s) for the pod to be cleaned up before the
//     next round.
package policy

import (
	corev1 "k8s.io/api/core/v1"
)

// Signal is an eviction signal, named as in the kubelet's configuration.
type Signal string

// The eviction signals the kubelet knows.
const (
	// SignalMemoryAvailable is the node's memory capacity less its working set, in bytes.
	SignalMemoryAvailable Signal = "memory.available"
	// SignalAllocatableMemoryAvailable is the memory left to pods: the pods' cgroup's
	// allocatable memory less its working set, in bytes.
	SignalAllocatableMemoryAvailable Signal = "allocatableMemory.available"
	// SignalNodeFsAvailable is the free space, in bytes, on the kubelet's filesystem
	// (volumes, logs, and everything else unless the runtime has its own filesystem).
	SignalNodeFsAvailable Signal = "nodefs.available"
	// SignalNodeFsInodesFree is the free inodes on the kubelet's filesystem.
	SignalNodeFsInodesFree Signal = "nodefs.inodesFree"
	// SignalImageFsAvailable is the free space, in bytes, on the runtime's image
	// filesystem.
	SignalImageFsAvailable Signal = "imagefs.available"
	// SignalImageFsInodesFree is the free inodes on the runtime's image filesystem.
	SignalImageFsInodesFree Signal = "imagefs.inodesFree"
	// SignalContainerFsAvailable is the free space, in bytes, on the filesystem that holds
	// the containers' writable layers: nodefs or imagefs depending on the layout (see
	// Config.ForLayout).
	SignalContainerFsAvailable Signal = "containerfs.available"
	// SignalContainerFsInodesFree is the free inodes on the filesystem that holds the
	// containers' writable layers.
	SignalContainerFsInodesFree Signal = "containerfs.inodesFree"
	// SignalPIDAvailable is the node's process IDs left: its PID limit less the running
	// processes.
	SignalPIDAvailable Signal = "pid.available"
)

// Signals lists every signal, in the order of their names.
var Signals = []Signal{
	SignalAllocatableMemoryAvailable,
	SignalContainerFsAvailable,
	SignalContainerFsInodesFree,
	SignalImageFsAvailable,
	SignalImageFsInodesFree,
	SignalMemoryAvailable,
	SignalNodeFsAvailable,
	SignalNodeFsInodesFree,
	SignalPIDAvailable,
}

// Resource names that are not core/v1's: the kubelet speaks of inodes and pids as
// resources in its eviction messages and annotations.
const (
	ResourceInodes corev1.ResourceName = "inodes"
	ResourcePIDs   corev1.ResourceName = "pids"
)

// Valid tells whether s is a signal the kubelet knows.
func (s Signal) Valid() bool {
	return Resource(s) != ""
}

// ConditionFor is the node condition a threshold on s raises: MemoryPressure for the two
// memory signals, PIDPressure for pid.available, DiskPressure for the filesystem ones. It
// is empty for an unknown signal.
func ConditionFor(s Signal) corev1.NodeConditionType {
	switch s {
	case SignalMemoryAvailable, SignalAllocatableMemoryAvailable:
		return corev1.NodeMemoryPressure
	case SignalPIDAvailable:
		return corev1.NodePIDPressure
	case SignalNodeFsAvailable, SignalNodeFsInodesFree,
		SignalImageFsAvailable, SignalImageFsInodesFree,
		SignalContainerFsAvailable, SignalContainerFsInodesFree:
		return corev1.NodeDiskPressure
	}
	return ""
}

// Resource is the resource the kubelet reclaims when a threshold on s is met, the word in
// its messages ("The node was low on resource: memory. ") and in the starved_resource
// annotation: memory, ephemeral-storage, inodes or pids. It is empty for an unknown signal.
func Resource(s Signal) corev1.ResourceName {
	switch s {
	case SignalMemoryAvailable, SignalAllocatableMemoryAvailable:
		return corev1.ResourceMemory
	case SignalNodeFsAvailable, SignalImageFsAvailable, SignalContainerFsAvailable:
		return corev1.ResourceEphemeralStorage
	case SignalNodeFsInodesFree, SignalImageFsInodesFree, SignalContainerFsInodesFree:
		return ResourceInodes
	case SignalPIDAvailable:
		return ResourcePIDs
	}
	return ""
}

// isMemory tells whether s is one of the memory signals, which the kubelet reclaims before
// any other.
func isMemory(s Signal) bool {
	return s == SignalMemoryAvailable || s == SignalAllocatableMemoryAvailable
}

// FsLayout is how the node's filesystems are laid out. It decides what node-level reclaim
// frees for each filesystem signal, which of a pod's disk usage counts when ranking for
// that signal, and which filesystem containerfs stands for.
type FsLayout struct {
	// DedicatedImageFs is true when the runtime's image filesystem is not the kubelet's
	// root filesystem (nodefs) (the kubelet's HasDedicatedImageFs).
	DedicatedImageFs bool
	// SplitContainerFs is true when the containers' writable layers are on a filesystem
	// other than the images' (the kubelet's HasDedicatedContainerFs, KubeletSeparateDiskGC):
	// images on imagefs, writable layers on nodefs.
	SplitContainerFs bool
}

// NodeReclaim tells what the kubelet frees on the node, before it evicts any pod, when a
// threshold on s is met: dead containers (and their sandboxes), unused images, both or
// neither. Memory and PID signals free nothing at node level. On one filesystem every
// disk signal frees both; with a dedicated image filesystem, nodefs frees nothing (the
// kubelet goes straight to eviction) and imagefs and containerfs free both; with the
// writable layers split from the images, imagefs frees images only and nodefs and
// containerfs dead containers only.
func NodeReclaim(s Signal, layout FsLayout) (deadContainers, unusedImages bool) {
	nodeFs := s == SignalNodeFsAvailable || s == SignalNodeFsInodesFree
	imageFs := s == SignalImageFsAvailable || s == SignalImageFsInodesFree
	containerFs := s == SignalContainerFsAvailable || s == SignalContainerFsInodesFree
	if !nodeFs && !imageFs && !containerFs {
		return false, false
	}
	switch {
	case layout.DedicatedImageFs && !layout.SplitContainerFs:
		if nodeFs {
			return false, false
		}
		return true, true
	case layout.DedicatedImageFs && layout.SplitContainerFs:
		if imageFs {
			return false, true
		}
		return true, false
	default:
		return true, true
	}
}
