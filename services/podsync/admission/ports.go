package admission

import (
	corev1 "k8s.io/api/core/v1"
)

// bindAll is the host IP a port without one is bound to; it overlaps every address.
const bindAll = "0.0.0.0"

type hostPort struct {
	ip       string
	protocol corev1.Protocol
	port     int32
}

// hostPorts lists the host ports a pod holds for its whole life: those of its app
// containers and of its sidecars (init containers with restartPolicy Always). Empty IP
// means 0.0.0.0 and empty protocol TCP.
func hostPorts(pod *corev1.Pod) []hostPort {
	var out []hostPort
	add := func(c *corev1.Container) {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			hp := hostPort{ip: p.HostIP, protocol: p.Protocol, port: p.HostPort}
			if hp.ip == "" {
				hp.ip = bindAll
			}
			if hp.protocol == "" {
				hp.protocol = corev1.ProtocolTCP
			}
			out = append(out, hp)
		}
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	return out
}

// portsConflict reports whether pod wants a host port another pod holds: same protocol
// and port, and the same IP or 0.0.0.0 on either side.
func portsConflict(pod *corev1.Pod, others []*corev1.Pod) bool {
	want := hostPorts(pod)
	if len(want) == 0 {
		return false
	}
	type protoPort struct {
		protocol corev1.Protocol
		port     int32
	}
	inUse := make(map[string]map[protoPort]bool) // host IP -> ports bound on it
	for _, p := range others {
		for _, hp := range hostPorts(p) {
			if inUse[hp.ip] == nil {
				inUse[hp.ip] = make(map[protoPort]bool)
			}
			inUse[hp.ip][protoPort{hp.protocol, hp.port}] = true
		}
	}
	for _, w := range want {
		pp := protoPort{w.protocol, w.port}
		if w.ip == bindAll {
			for _, ports := range inUse {
				if ports[pp] {
					return true
				}
			}
			continue
		}
		if inUse[bindAll][pp] || inUse[w.ip][pp] {
			return true
		}
	}
	return false
}
