package criconfig

import (
	"bytes"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// EtcHostsPath is where containers find the hosts file podsync writes for their pod.
const EtcHostsPath = "/etc/hosts"

// The first line of the hosts files podsync writes, as the kubelet writes them.
const (
	managedHostsHeader            = "# Kubernetes-managed hosts file.\n"
	managedHostsHeaderHostNetwork = "# Kubernetes-managed hosts file (host network).\n"
)

// ManagedHostsFile is the /etc/hosts of a pod on the pod network, as the kubelet writes
// it: the header, the IPv4 and IPv6 localhost and multicast lines, one line per pod IP
// naming the pod's hostname (with its FQDN first when domain is set, see
// HostnameAndDomain), then the pod's hostAliases.
func ManagedHostsFile(podIPs []string, hostname, domain string, aliases []corev1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString(managedHostsHeader)
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	for _, ip := range podIPs {
		if domain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
		}
	}
	b.Write(hostAliasEntries(aliases))
	return b.Bytes()
}

// HostNetworkHostsFile is the /etc/hosts of a pod on the host network: the node's own
// hosts file under the kubelet's header, then the pod's hostAliases.
func HostNetworkHostsFile(nodeHosts []byte, aliases []corev1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString(managedHostsHeaderHostNetwork)
	b.Write(nodeHosts)
	b.Write(hostAliasEntries(aliases))
	return b.Bytes()
}

// hostAliasEntries is the hostAliases section: a blank line and a comment, then one
// line per alias, its hostnames separated by tabs. No aliases, no section.
func hostAliasEntries(aliases []corev1.HostAlias) []byte {
	if len(aliases) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("\n# Entries added by HostAliases.\n")
	for _, a := range aliases {
		fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
	return b.Bytes()
}

// MountsEtcHosts reports whether podsync mounts its hosts file into c, as the kubelet
// decides: the pod is on the host network or has an IP (its sandbox exists), and c does
// not mount a volume of its own at /etc/hosts.
func MountsEtcHosts(pod *corev1.Pod, c *corev1.Container, podIPs []string) bool {
	if len(podIPs) == 0 && !pod.Spec.HostNetwork {
		return false
	}
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == EtcHostsPath {
			return false
		}
	}
	return true
}
