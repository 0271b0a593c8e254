package criconfig

import (
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// SandboxConfig builds the RunPodSandbox config for the pod's attempt-th sandbox:
// metadata, the kubelet's labels and the pod's annotations, hostname, log directory,
// DNS, port mappings and the Linux part (cgroup parent, namespaces, sysctls, security
// context, resources and overhead).
func SandboxConfig(pod *corev1.Pod, attempt uint32, o Options) (*runtimeapi.PodSandboxConfig, error) {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name:      pod.Name,
			Namespace: pod.Namespace,
			Uid:       string(pod.UID),
			Attempt:   attempt,
		},
		Labels:       sandboxLabels(pod),
		Annotations:  sandboxAnnotations(pod),
		LogDirectory: PodLogDir(o.PodLogsDir, pod.Namespace, pod.Name, pod.UID),
	}
	dns, err := podDNS(pod, o)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: dns config: %w", pod.Namespace, pod.Name, err)
	}
	cfg.DnsConfig = dns

	// On the host network the sandbox keeps the node's hostname.
	if !pod.Spec.HostNetwork {
		hostname, err := Hostname(pod, o)
		if err != nil {
			// Unwrapped: the kubelet's FailedCreatePodSandBox event carries it as is.
			return nil, err
		}
		cfg.Hostname = hostname
	}

	for i := range pod.Spec.Containers {
		cfg.PortMappings = append(cfg.PortMappings, portMappings(&pod.Spec.Containers[i])...)
	}

	lc, err := sandboxLinux(pod, o)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	cfg.Linux = lc
	return cfg, nil
}

// PodLogDir is the pod's log directory: <podLogsDir>/<namespace>_<name>_<uid>.
func PodLogDir(podLogsDir, namespace, name string, uid types.UID) string {
	return filepath.Join(podLogsDir, namespace+"_"+name+"_"+string(uid))
}

// ContainerLogPath is a container instance's log file relative to the pod's log
// directory: <container>/<restartCount>.log.
func ContainerLogPath(containerName string, restartCount int) string {
	return filepath.Join(containerName, fmt.Sprintf("%d.log", restartCount))
}

// HostnameAndDomain are the pod's short hostname and its domain, as the kubelet makes
// them: spec.hostnameOverride when set (and the HostnameOverride feature gate is on),
// without a domain; else spec.hostname or the pod name; either cut to 63 characters. The
// domain, with a spec.subdomain, is <subdomain>.<namespace>.svc.<clusterDomain>.
func HostnameAndDomain(pod *corev1.Pod, o Options) (hostname, domain string, err error) {
	if pod.Spec.HostnameOverride != nil && !o.IgnoreHostnameOverride {
		h := *pod.Spec.HostnameOverride
		if msgs := validation.IsDNS1123Subdomain(h); len(msgs) > 0 {
			return "", "", fmt.Errorf("pod HostnameOverride %q is not a valid DNS subdomain: %s", h, strings.Join(msgs, ";"))
		}
		h, err := truncateHostname(pod.Name, h)
		return h, "", err
	}
	hostname = pod.Name
	if pod.Spec.Hostname != "" {
		if msgs := validation.IsDNS1123Label(pod.Spec.Hostname); len(msgs) > 0 {
			return "", "", fmt.Errorf("pod Hostname %q is not a valid DNS label: %s", pod.Spec.Hostname, strings.Join(msgs, ";"))
		}
		hostname = pod.Spec.Hostname
	}
	if hostname, err = truncateHostname(pod.Name, hostname); err != nil {
		return "", "", err
	}
	if pod.Spec.Subdomain != "" {
		if msgs := validation.IsDNS1123Label(pod.Spec.Subdomain); len(msgs) > 0 {
			return "", "", fmt.Errorf("pod Subdomain %q is not a valid DNS label: %s", pod.Spec.Subdomain, strings.Join(msgs, ";"))
		}
		domain = pod.Spec.Subdomain + "." + pod.Namespace + ".svc." + o.ClusterDomain
	}
	return hostname, domain, nil
}

// Hostname is the hostname the pod's sandbox gets (see HostnameAndDomain); with
// setHostnameAsFQDN and a domain, the FQDN <hostname>.<domain>, which must fit the
// kernel's 64-character nodename.
func Hostname(pod *corev1.Pod, o Options) (string, error) {
	hostname, domain, err := HostnameAndDomain(pod, o)
	if err != nil {
		return "", err
	}
	if domain == "" || pod.Spec.SetHostnameAsFQDN == nil || !*pod.Spec.SetHostnameAsFQDN {
		return hostname, nil
	}
	const maxFQDN = 64
	fqdn := hostname + "." + domain
	if len(fqdn) > maxFQDN {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)", fqdn, maxFQDN, len(fqdn))
	}
	return fqdn, nil
}

// truncateHostname cuts a hostname to 63 characters, then drops trailing '-' and '.'.
func truncateHostname(podName, h string) (string, error) {
	const maxLen = 63
	if len(h) <= maxLen {
		return h, nil
	}
	t := strings.TrimRight(h[:maxLen], "-.")
	if t == "" {
		return "", fmt.Errorf("hostname for pod %q was invalid: %q", podName, h)
	}
	return t, nil
}

// portMappings lists a container's ports as the kubelet does: every declared port
// (the runtime publishes those with a hostPort), a repeated name or identical
// unnamed entry only once.
func portMappings(c *corev1.Container) []*runtimeapi.PortMapping {
	var out []*runtimeapi.PortMapping
	seen := map[string]bool{}
	for _, p := range c.Ports {
		key := p.Name
		if key == "" {
			family := "any"
			if p.HostIP != "" {
				family = "v4"
				if strings.Contains(p.HostIP, ":") {
					family = "v6"
				}
			}
			key = fmt.Sprintf("%s-%s-%s:%d:%d", family, p.Protocol, p.HostIP, p.ContainerPort, p.HostPort)
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, &runtimeapi.PortMapping{
			Protocol:      runtimeProtocol(p.Protocol),
			ContainerPort: p.ContainerPort,
			HostPort:      p.HostPort,
			HostIp:        p.HostIP,
		})
	}
	return out
}

func runtimeProtocol(p corev1.Protocol) runtimeapi.Protocol {
	switch p {
	case corev1.ProtocolUDP:
		return runtimeapi.Protocol_UDP
	case corev1.ProtocolSCTP:
		return runtimeapi.Protocol_SCTP
	default:
		return runtimeapi.Protocol_TCP
	}
}

func sandboxLinux(pod *corev1.Pod, o Options) (*runtimeapi.LinuxPodSandboxConfig, error) {
	parent := ""
	if o.CgroupParent != nil {
		parent = o.CgroupParent(pod)
	}
	sc := &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: namespaceOptions(pod, o),
		Privileged:       hasPrivilegedContainer(pod),
		// The sandbox (pause) process always runs with the runtime's default profile.
		Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	lc := &runtimeapi.LinuxPodSandboxConfig{
		CgroupParent:    parent,
		SecurityContext: sc,
		Sysctls:         map[string]string{},
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		for _, s := range psc.Sysctls {
			lc.Sysctls[utilsysctl.NormalizeName(s.Name)] = s.Value
		}
		if psc.RunAsUser != nil {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
		}
		if psc.RunAsGroup != nil {
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
		}
		sc.SupplementalGroups = supplementalGroups(psc)
		var err error
		if sc.SupplementalGroupsPolicy, err = supplementalGroupsPolicy(psc); err != nil {
			return nil, err
		}
		if s := psc.SELinuxOptions; s != nil {
			sc.SelinuxOptions = &runtimeapi.SELinuxOption{User: s.User, Role: s.Role, Type: s.Type, Level: s.Level}
		}
	}

	opts := resourcehelper.PodResourcesOptions{ExcludeOverhead: true}
	req := resourcehelper.PodRequests(pod, opts)
	lim := resourcehelper.PodLimits(pod, opts)
	var cpuReq *int64
	if q, ok := req[corev1.ResourceCPU]; ok {
		m := q.MilliValue()
		cpuReq = &m
	}
	lc.Resources = linuxResources(cpuReq, lim.Cpu().MilliValue(), lim.Memory().Value())
	lc.Overhead = &runtimeapi.LinuxContainerResources{}
	if pod.Spec.Overhead != nil {
		// Overhead is accounted as guaranteed: request and limit alike.
		cpu := pod.Spec.Overhead.Cpu().MilliValue()
		lc.Overhead = linuxResources(&cpu, cpu, pod.Spec.Overhead.Memory().Value())
	}
	return lc, nil
}

// namespaceOptions: hostNetwork/hostPID/hostIPC share the node's namespaces; otherwise
// network and IPC belong to the pod, and PID to each container unless the pod shares
// its process namespace. A pod with hostUsers: false has the user namespace o gives it.
func namespaceOptions(pod *corev1.Pod, o Options) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{
		Network:       runtimeapi.NamespaceMode_POD,
		Pid:           runtimeapi.NamespaceMode_CONTAINER,
		Ipc:           runtimeapi.NamespaceMode_POD,
		UsernsOptions: o.UserNamespace,
	}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	return ns
}

func hasPrivilegedContainer(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if sc := cs[i].SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
				return true
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if sc := pod.Spec.EphemeralContainers[i].SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
			return true
		}
	}
	return false
}

// supplementalGroups: fsGroup first, then spec.securityContext.supplementalGroups.
func supplementalGroups(psc *corev1.PodSecurityContext) []int64 {
	var groups []int64
	if psc.FSGroup != nil {
		groups = append(groups, *psc.FSGroup)
	}
	return append(groups, psc.SupplementalGroups...)
}

func supplementalGroupsPolicy(psc *corev1.PodSecurityContext) (runtimeapi.SupplementalGroupsPolicy, error) {
	if psc.SupplementalGroupsPolicy == nil {
		return runtimeapi.SupplementalGroupsPolicy_Merge, nil
	}
	v, ok := runtimeapi.SupplementalGroupsPolicy_value[string(*psc.SupplementalGroupsPolicy)]
	if !ok {
		return 0, fmt.Errorf("spec.securityContext.supplementalGroupsPolicy: unsupported value %q", *psc.SupplementalGroupsPolicy)
	}
	return runtimeapi.SupplementalGroupsPolicy(v), nil
}
