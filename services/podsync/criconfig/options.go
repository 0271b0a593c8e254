package criconfig

import (
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Options are the node-wide settings the configs depend on; they come from the kubelet
// configuration and the node.
type Options struct {
	// ClusterDNS are the cluster DNS server IPs (kubelet config clusterDNS).
	ClusterDNS []string
	// ClusterDomain is the cluster's DNS domain (kubelet config clusterDomain).
	ClusterDomain string
	// ResolvConf is the host resolver file pods with dnsPolicy Default start from
	// (kubelet config resolvConf); empty means no host DNS.
	ResolvConf string
	// IgnoreHostnameOverride is set when the HostnameOverride feature gate is off (it is
	// on by default): spec.hostnameOverride is then not used.
	IgnoreHostnameOverride bool

	// PodLogsDir is the root of the pod log directories, normally "/var/log/pods".
	PodLogsDir string
	// PodsDir is <root-dir>/pods: the per-pod directories where the termination-message
	// files live.
	PodsDir string
	// CgroupParent is the pod's cgroup as the runtime takes it (the driver's notation);
	// nil leaves the parent to the runtime.
	CgroupParent func(*corev1.Pod) string

	// NodeName is the node's name.
	NodeName string
	// NodeIPs are the node's IPs, first the preferred one.
	NodeIPs []string

	// MemoryCapacity is the node's memory in bytes, for the OOM score adjustment of
	// burstable containers. Zero leaves burstable containers at the burstable maximum (999).
	MemoryCapacity int64
	// HugePageSizes are the huge page sizes the host supports, in the runtime's notation
	// ("2MB", "1GB"); see HostHugePageSizes. Each gets a limit (0 unless requested).
	HugePageSizes []string
	// SeccompProfileRoot is the directory Localhost seccomp profiles are relative to,
	// normally <root-dir>/seccomp.
	SeccompProfileRoot string
	// OOMKillGroup sets memory.oom.group on each container's cgroup (cgroup v2, unless
	// kubelet config singleProcessOOMKill), so that an OOM kill takes all its processes.
	OOMKillGroup bool
	// SwapController: the kernel controls swap per cgroup (memory.swap.max in podsync's
	// own cgroup on v2, memory.memsw.limit_in_bytes on v1): containers are kept from
	// swapping (see noSwap). CgroupV1 says which hierarchy the node has.
	SwapController, CgroupV1 bool
	// LimitedSwap is memorySwap.swapBehavior LimitedSwap: some containers may swap (see
	// limitedSwap), a share of SwapCapacity, the node's swap in bytes.
	LimitedSwap  bool
	SwapCapacity int64
	// RecursiveReadOnly: the pod's runtime handler supports recursive read-only mounts
	// (CRI Status's handler features), set per pod by the caller.
	RecursiveReadOnly bool
	// UserNamespace is the pod's user namespace (hostUsers: false), set per pod by the
	// caller; nil: the node's.
	UserNamespace *runtimeapi.UserNamespace
	// SeccompDefault makes RuntimeDefault the seccomp profile of containers that name
	// none (kubelet config seccompDefault); otherwise they run Unconfined.
	SeccompDefault bool
}

// Mount is one volume mount prepared for a container.
type Mount struct {
	// ContainerPath is where the mount appears in the container.
	ContainerPath string
	// HostPath is the volume's directory or file on the host.
	HostPath string
	// ReadOnly mounts it read-only.
	ReadOnly bool
	// Propagation is the mount propagation mode.
	Propagation runtimeapi.MountPropagation
	// SubPath, when set, is a path inside HostPath that is mounted instead of HostPath.
	SubPath string
	// Device: a block volume (volumeDevices) handed to the container as the device at
	// ContainerPath, HostPath being the device (or a link to it); ReadOnly gives it read
	// permission only.
	Device bool
	// Image, for an image volume, is the image the runtime mounts (read-only) at
	// ContainerPath, SubPath a directory in it; HostPath is then empty.
	Image string
}
