package podsync

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/lifecycle"
	"github.com/unitlet/unitlet/services/podsync/podworker"
	"github.com/unitlet/unitlet/services/podsync/prober"
	"github.com/unitlet/unitlet/services/podsync/relist"
	"github.com/unitlet/unitlet/shared/cri"
	"github.com/unitlet/unitlet/shared/kubeapi"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/nodeinfo"
)

// workerOptions are the pod workers' parts: the runtime and the relister's view of it, the
// CRI settings from the configuration, the API's objects, probes, hooks, events, volumes,
// and svc, which receives what they observe.
func workerOptions(nc *nodeconfig.Config, node *corev1.Node, machine nodeinfo.Machine, rt *cri.Client, relister *relist.Relister, client kubeapi.Interface,
	probes *prober.Manager, volumes *busVolumes, events podworker.Recorder, svc *Service, clk clock.WithTicker, reg prometheus.Registerer, log *slog.Logger) podworker.Options {
	kc, rootDir, hostIPs := nc.KubeletConfiguration, nc.Paths.GetRootDir(), nc.Node.GetIps()
	hostnameOverride, set := kc.FeatureGates["HostnameOverride"] // beta, on by default
	hugePageSizes, err := criconfig.HostHugePageSizes()
	if err != nil {
		log.Warn("huge page sizes: containers get no huge page limits", "err", err)
	}
	return podworker.Options{
		Runtime: rt,
		View:    relister,
		CRI: criconfig.Options{
			ClusterDNS: kc.ClusterDNS, ClusterDomain: kc.ClusterDomain, ResolvConf: ptr.Deref(kc.ResolverConfig, ""),
			PodLogsDir: kc.PodLogsDir, PodsDir: filepath.Join(rootDir, "pods"),
			NodeName: nc.Node.GetName(), NodeIPs: hostIPs, IgnoreHostnameOverride: set && !hostnameOverride,
			// Burstable containers' OOM score adjustment is taken of the node's memory.
			MemoryCapacity: machine.MemoryBytes, HugePageSizes: hugePageSizes,
			SeccompDefault: ptr.Deref(kc.SeccompDefault, false), SeccompProfileRoot: filepath.Join(rootDir, "seccomp"),
		},
		Objects: apiObjects{client},
		Probes:  probes,
		Hooks: func(ctx context.Context, pod *corev1.Pod, c *corev1.Container, containerID, podIP string, h *corev1.LifecycleHandler) error {
			return lifecycle.RunHook(ctx, rt, pod, c, containerID, podIP, h)
		},
		Events:      events,
		Report:      svc.Report,
		Allocatable: func() corev1.ResourceList { return node.Status.Allocatable },
		HostIPs:     func() []string { return hostIPs },
		Clock:       clk,
		Log:         log.With("component", "podworker"),
		Registry:    reg,
		Resync:      kc.SyncFrequency.Duration,
		Volumes:     volumes,
		StateDir:    filepath.Join(rootDir, "podsync"),
		PullLimits:  pullLimits(kc),
	}
}

// pullLimits are the configuration's limits on image pulls: registryPullQPS and
// registryBurst, and one pull at a time with serializeImagePulls, else
// maxParallelImagePulls (unset: no limit).
func pullLimits(kc *kubeletconfigv1beta1.KubeletConfiguration) podworker.PullLimits {
	l := podworker.PullLimits{QPS: float32(ptr.Deref(kc.RegistryPullQPS, 5)), Burst: int(kc.RegistryBurst)}
	switch {
	case ptr.Deref(kc.SerializeImagePulls, true):
		l.Parallel = 1
	case kc.MaxParallelImagePulls != nil:
		l.Parallel = int(*kc.MaxParallelImagePulls)
	}
	return l
}
