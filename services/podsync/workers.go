package podsync

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/lifecycle"
	"github.com/unitlet/unitlet/services/podsync/podworker"
	"github.com/unitlet/unitlet/services/podsync/prober"
	"github.com/unitlet/unitlet/services/podsync/relist"
)

// workerOptions are the pod workers' parts: the runtime, its container starts and
// removals told to the container logs, and the relister's view of it; the CRI settings
// from the configuration with the pods' cgroups; the API's objects, services and
// RuntimeClasses (none standalone); probes, hooks, events, volumes, credential providers
// and image pull records; and svc, which receives what they observe.
func (p *parts) workerOptions(svc *Service, relister *relist.Relister, probes *prober.Manager, services *serviceLister, classes *runtimeClasses) podworker.Options {
	kc, rootDir, hostIPs := p.kc, p.nc.Paths.GetRootDir(), p.nc.Node.GetIps()
	hostnameOverride, set := kc.FeatureGates["HostnameOverride"] // beta, on by default
	hugePageSizes, err := criconfig.HostHugePageSizes()
	if err != nil {
		p.log.Warn("huge page sizes: containers get no huge page limits", "err", err)
	}
	return podworker.Options{
		Runtime: loggedRuntime{Runtime: p.rt, logs: p.logs, log: p.log},
		View:    relister,
		CRI: criconfig.Options{
			ClusterDNS: kc.ClusterDNS, ClusterDomain: kc.ClusterDomain, ResolvConf: ptr.Deref(kc.ResolverConfig, ""),
			PodLogsDir: kc.PodLogsDir, PodsDir: p.podsDir(),
			NodeName: p.nc.Node.GetName(), NodeIPs: hostIPs, IgnoreHostnameOverride: set && !hostnameOverride,
			// Burstable containers' OOM score adjustment is taken of the node's memory.
			MemoryCapacity: p.machine.MemoryBytes, HugePageSizes: hugePageSizes,
			SeccompDefault: ptr.Deref(kc.SeccompDefault, false), SeccompProfileRoot: filepath.Join(rootDir, "seccomp"),
			CgroupParent: p.cgroups.Parent,
			// As the kubelet: on cgroup v2 the kernel kills a container's processes together
			// on OOM unless singleProcessOOMKill (unitlet-config refuses false on v1).
			OOMKillGroup: p.cgroups.m.Unified() && !ptr.Deref(kc.SingleProcessOOMKill, false),
			// NoSwap, the kubelet's default swap behavior, where the kernel controls swap;
			// LimitedSwap on cgroup v2 (swapBehavior).
			SwapController: p.cgroups.swapController(), CgroupV1: !p.cgroups.m.Unified(),
			LimitedSwap: limitedSwap(kc, p.cgroups, p.log), SwapCapacity: p.machine.SwapBytes,
		},
		Objects: apiObjects{p.client},
		Probes:  probes,
		Hooks: func(ctx context.Context, pod *corev1.Pod, c *corev1.Container, containerID, podIP string, h *corev1.LifecycleHandler) error {
			return lifecycle.RunHook(ctx, p.rt, pod, c, containerID, podIP, h)
		},
		Events:                  p.events,
		Report:                  svc.Report,
		Allocatable:             func() corev1.ResourceList { return p.node.Status.Allocatable },
		HostIPs:                 func() []string { return hostIPs },
		Clock:                   p.clk,
		Log:                     p.log.With("component", "podworker"),
		Registry:                p.reg,
		Resync:                  kc.SyncFrequency.Duration,
		Volumes:                 p.volumes,
		StateDir:                p.stateDir(),
		PullLimits:              pullLimits(kc),
		Services:                services.forWorkers(),
		RuntimeClasses:          classes.forWorkers(),
		RecursiveReadOnly:       func(handler string) bool { return svc.runtime.RecursiveReadOnly[handler] },
		UserNamespaces:          p.userNamespaces(),
		UserNamespacesSupported: func(handler string) bool { return svc.runtime.UserNamespacesBy[handler] },
		CrashLoopBackOffMax:     crashLoopBackOffMax(kc),
		Cgroups:                 p.cgroups,
		CredentialProviders:     p.credentials,
		PullRecords:             p.records,
	}
}

// userNamespaces hands out the user namespaces of pods with hostUsers: false, from the
// kubelet's range of IDs; nil (such pods then fail their sandbox, saying so) when the
// range is unusable.
func (p *parts) userNamespaces() *podworker.UserNamespaces {
	ids, err := podworker.KubeletIDRange("/etc")
	if err == nil {
		var u *podworker.UserNamespaces
		if u, err = podworker.NewUserNamespaces(p.stateDir(), ids, int(p.kc.MaxPods)); err == nil {
			return u
		}
	}
	p.log.Warn("user namespaces: pods with hostUsers: false will fail their sandbox", "err", err)
	return nil
}

// stateDir keeps what podsync must know across its restarts (<root-dir>/podsync).
func (p *parts) stateDir() string { return filepath.Join(p.nc.Paths.GetRootDir(), "podsync") }

// podsDir holds the pods' directories (<root-dir>/pods).
func (p *parts) podsDir() string { return filepath.Join(p.nc.Paths.GetRootDir(), "pods") }

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

// crashLoopBackOffMax is crashLoopBackOff.maxContainerRestartPeriod under the gate
// KubeletCrashLoopBackOffMax (beta, on; unitlet-config defaults and validates it, and
// refuses the field with the gate off); 0, the kubelet's 5 min, otherwise.
func crashLoopBackOffMax(kc *kubeletconfigv1beta1.KubeletConfiguration) time.Duration {
	if on, set := kc.FeatureGates["KubeletCrashLoopBackOffMax"]; set && !on {
		return 0
	}
	if p := kc.CrashLoopBackOff.MaxContainerRestartPeriod; p != nil {
		return p.Duration
	}
	return 0
}

// limitedSwap reports whether containers may swap (memorySwap.swapBehavior LimitedSwap),
// saying so, and why not where the node cannot: as the kubelet, only on cgroup v2 with a
// swap controller; elsewhere containers get no swap.
func limitedSwap(kc *kubeletconfigv1beta1.KubeletConfiguration, cg *nodeCgroups, log *slog.Logger) bool {
	if kc.MemorySwap.SwapBehavior != "LimitedSwap" {
		return false
	}
	switch {
	case !cg.m.Unified():
		log.Warn("memorySwap.swapBehavior LimitedSwap needs cgroup v2: containers get no swap (NoSwap)")
		return false
	case !cg.swapController():
		log.Warn("memorySwap.swapBehavior LimitedSwap: the kernel does not control swap per cgroup (no memory.swap.max): containers get no swap")
		return false
	}
	log.Info("memorySwap.swapBehavior LimitedSwap: Burstable containers may swap their memory request's share of the node's swap")
	return true
}
