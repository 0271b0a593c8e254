package harnesstest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The kubelet's localhost lines of a managed hosts file.
const managedLocalhost = "# Kubernetes-managed hosts file.\n" +
	"127.0.0.1\tlocalhost\n" +
	"::1\tlocalhost ip6-localhost ip6-loopback\n" +
	"fe00::0\tip6-localnet\n" +
	"fe00::0\tip6-mcastprefix\n" +
	"fe00::1\tip6-allnodes\n" +
	"fe00::2\tip6-allrouters\n"

// netNamespace makes a namespace for the test and waits for its default service account
// (pods cannot be created before it).
func netNamespace(t *testing.T, prefix string) string {
	t.Helper()
	c := admin(t)
	ns, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() { _ = c.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	stack.WaitFor(t, time.Minute, "service account default in "+ns.Name, func(ctx context.Context) (bool, string) {
		_, err := c.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return ns.Name
}

// netPod is a busybox pod in ns that sleeps.
func netPod(ns, name string) *corev1.Pod {
	p := busyboxPod(name, "sleep 3600")
	p.Namespace = ns
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	return p
}

// runningNetPod creates the pod and waits until the API says it runs.
func runningNetPod(t *testing.T, p *corev1.Pod) (*corev1.Pod, corev1.PodStatus) {
	t.Helper()
	created := createPod(t, p)
	var st corev1.PodStatus
	stack.WaitFor(t, time.Minute, p.Namespace+"/"+p.Name+" running", func(ctx context.Context) (bool, string) {
		got, err := admin(t).CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st = got.Status
		b, _ := json.Marshal(st)
		return st.Phase == corev1.PodRunning && len(st.PodIPs) > 0, string(b) + "\n" + podEvents(ctx, t, p.Name)
	})
	return created, st
}

// execIn runs a command in a container through kubectl exec.
func execIn(t *testing.T, ns, pod, container string, cmd ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := kubectl(ctx, t, append([]string{"exec", "-n", ns, pod, "-c", container, "--"}, cmd...)...)
	if err != nil {
		t.Fatalf("exec %v in %s/%s: %v\n%s", cmd, ns, pod, err, out)
	}
	return out
}

// TestPodspecNetEtcHosts: the pod's /etc/hosts is the kubelet's managed file (its IPs
// with hostname and FQDN, then hostAliases), its hostname the FQDN with
// setHostnameAsFQDN; a container mounting its own /etc/hosts keeps it; the file goes
// with the pod.
func TestPodspecNetEtcHosts(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	ns := netNamespace(t, "net-hosts-")
	cms := c.CoreV1().ConfigMaps(ns)
	createObject(t, cms.Create, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "own-hosts"}, Data: map[string]string{"hosts": "192.0.2.1\tmine\n"}}, cms.Delete, "own-hosts")

	p := netPod(ns, "hosts-web")
	p.Spec.Hostname, p.Spec.Subdomain, p.Spec.SetHostnameAsFQDN = "web-0", "sub", ptr.To(true)
	p.Spec.HostAliases = []corev1.HostAlias{
		{IP: "10.1.2.3", Hostnames: []string{"foo.local", "bar.local"}},
		{IP: "fd00::5", Hostnames: []string{"v6.local"}},
	}
	p.Spec.Volumes = []corev1.Volume{{Name: "own", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "own-hosts"}}}}}
	own := p.Spec.Containers[0]
	own.Name = "own"
	own.VolumeMounts = []corev1.VolumeMount{{Name: "own", MountPath: "/etc/hosts", SubPath: "hosts"}}
	p.Spec.Containers = append(p.Spec.Containers, own)
	created, st := runningNetPod(t, p)

	fqdn := "web-0.sub." + ns + ".svc.cluster.local"
	want := managedLocalhost
	ips := st.PodIPs
	if len(ips) == 0 {
		t.Fatalf("pod has no IPs: %+v", st)
	}
	for _, ip := range ips {
		want += ip.IP + "\t" + fqdn + "\tweb-0\n"
	}
	want += "\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\nfd00::5\tv6.local\n"
	if got := execIn(t, ns, "hosts-web", "main", "cat", "/etc/hosts"); got != want {
		t.Errorf("/etc/hosts of main:\n%s\nwant:\n%s", got, want)
	}
	if got := strings.TrimSpace(execIn(t, ns, "hosts-web", "main", "hostname")); got != fqdn {
		t.Errorf("hostname %q, want the FQDN %q (setHostnameAsFQDN)", got, fqdn)
	}
	if got := strings.TrimSpace(execIn(t, ns, "hosts-web", "main", "cat", "/etc/hostname")); got != fqdn {
		t.Errorf("/etc/hostname %q, want %q", got, fqdn)
	}
	// Read-write, as the kubelet mounts it.
	execIn(t, ns, "hosts-web", "main", "sh", "-c", "echo 192.0.2.9 added >> /etc/hosts")
	if got := execIn(t, ns, "hosts-web", "own", "cat", "/etc/hosts"); got != "192.0.2.1\tmine\n" {
		t.Errorf("/etc/hosts of the container that mounts its own: %q, want its own", got)
	}

	file := filepath.Join(stack.Dir(), "nodes", podsyncNode, "state", "pods", string(created.UID), "etc-hosts")
	if b, err := os.ReadFile(file); err != nil || !strings.HasPrefix(string(b), managedLocalhost) {
		t.Errorf("the node's copy %s: %v %q", file, err, b)
	}
	if err := c.CoreV1().Pods(ns).Delete(context.Background(), "hosts-web", deleteNow()); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, time.Minute, file+" removed with the pod", func(context.Context) (bool, string) {
		_, err := os.Stat(file)
		return os.IsNotExist(err), fmt.Sprint(err)
	})
}

// TestPodspecNetHostnameOverride: spec.hostnameOverride is the pod's hostname and the
// name its /etc/hosts gives its IP, without a domain.
func TestPodspecNetHostnameOverride(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	ns := netNamespace(t, "net-override-")
	p := netPod(ns, "override")
	p.Spec.HostnameOverride = ptr.To("custom-host.example")
	p.Spec.Subdomain = "sub"
	_, st := runningNetPod(t, p)
	if got := strings.TrimSpace(execIn(t, ns, "override", "main", "hostname")); got != "custom-host.example" {
		t.Errorf("hostname %q, want the override", got)
	}
	want := managedLocalhost
	for _, ip := range st.PodIPs {
		want += ip.IP + "\tcustom-host.example\n"
	}
	if got := execIn(t, ns, "override", "main", "cat", "/etc/hosts"); got != want {
		t.Errorf("/etc/hosts:\n%s\nwant:\n%s", got, want)
	}
}

// TestPodspecNetFQDNTooLong: an FQDN beyond the kernel's 64 characters fails the sandbox
// with the kubelet's event.
func TestPodspecNetFQDNTooLong(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	p := netPod("default", "fqdn-long")
	p.Spec.Hostname, p.Spec.Subdomain, p.Spec.SetHostnameAsFQDN = strings.Repeat("h", 40), "sub", ptr.To(true)
	createPod(t, p)
	fqdn := p.Spec.Hostname + ".sub.default.svc.cluster.local"
	want := fmt.Sprintf("FailedCreatePodSandBox: Failed to create pod sandbox: failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (64 characters is the max, %d characters requested)", fqdn, len(fqdn))
	stack.WaitFor(t, time.Minute, "the FailedCreatePodSandBox event", func(ctx context.Context) (bool, string) {
		evs := podEvents(ctx, t, "fqdn-long")
		return strings.Contains(evs, want+"\n"), evs
	})
}

// TestPodspecNetHostNetworkEtcHosts: a host-network pod sees the node's /etc/hosts under
// the kubelet's header, then its hostAliases, and the node's hostname.
func TestPodspecNetHostNetworkEtcHosts(t *testing.T) {
	// Serial: may write and remove the machine's /etc/hosts.
	waitNodeReady(t, 90*time.Second)
	ns := "default"
	p := netPod(ns, "hostnet")
	p.Spec.HostNetwork = true
	p.Spec.HostAliases = []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"foo.local"}}}
	node, err := stack.Exec(podsyncNode, []string{"cat", "/etc/hosts"}).Output()
	if err != nil {
		// A node without /etc/hosts (the minimal nspawn machine): the container waits with
		// the kubelet's message until there is one.
		createPod(t, p)
		const msg = "open /etc/hosts: no such file or directory"
		stack.WaitFor(t, time.Minute, "main waiting in CreateContainerConfigError", func(ctx context.Context) (bool, string) {
			got, err := admin(t).CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			b, _ := json.Marshal(got.Status.ContainerStatuses)
			for _, cs := range got.Status.ContainerStatuses {
				if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerConfigError" && w.Message == msg {
					return true, ""
				}
			}
			return false, string(b)
		})
		node = []byte("127.0.0.1\tlocalhost\n192.0.2.2\t" + podsyncNode + "\n")
		stack.InNode(t, podsyncNode, "sh", "-c", "printf '"+strings.ReplaceAll(string(node), "\t", "\\t")+"' > /etc/hosts")
		t.Cleanup(func() { _ = stack.Exec(podsyncNode, []string{"rm", "-f", "/etc/hosts"}).Run() })
		stack.WaitFor(t, time.Minute, "hostnet running", func(ctx context.Context) (bool, string) {
			got, err := admin(t).CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return got.Status.Phase == corev1.PodRunning, string(got.Status.Phase)
		})
	} else {
		runningNetPod(t, p)
	}
	want := "# Kubernetes-managed hosts file (host network).\n" + string(node) + "\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\n"
	if got := execIn(t, ns, "hostnet", "main", "cat", "/etc/hosts"); got != want {
		t.Errorf("/etc/hosts:\n%s\nwant:\n%s", got, want)
	}
	// The sandbox gets no hostname: the runtime's host's stays. The stack's containerd may
	// run beside the node's machine, so that is the node's or this host's.
	nodeName, err := stack.Exec(podsyncNode, []string{"hostname"}).Output()
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if got := strings.TrimSpace(execIn(t, ns, "hostnet", "main", "hostname")); got != strings.TrimSpace(string(nodeName)) && got != host {
		t.Errorf("hostname %q, want the node's %q or the runtime host's %q", got, nodeName, host)
	}
}

// envOfPod is a container's environment from `env`, by name.
func envOfPod(t *testing.T, ns, pod string) map[string]string {
	t.Helper()
	out := execIn(t, ns, pod, "main", "env")
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

func withPrefix(env map[string]string, prefix string) []string {
	var out []string
	for k := range env {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// TestPodspecNetServiceLinks: containers get the service-link variables of their
// namespace's services and of the master service, read by the node's service informer
// with the node's credentials; enableServiceLinks false leaves only the master's; the
// container's own variables win.
func TestPodspecNetServiceLinks(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	ns := netNamespace(t, "net-links-")
	svcs := c.CoreV1().Services(ns)
	foo := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "foo-svc"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		}},
	}
	headless := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "headless"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	createObject(t, svcs.Create, foo, svcs.Delete, "foo-svc")
	createObject(t, svcs.Create, headless, svcs.Delete, "headless")
	foo, err := svcs.Get(context.Background(), "foo-svc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	master, err := c.CoreV1().Services("default").Get(context.Background(), "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// As with the kubelet, a pod created right after a service may miss it (the watch is
	// asynchronous): leave the informer a moment.
	time.Sleep(2 * time.Second)

	p := netPod(ns, "links")
	p.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "FOO_SVC_SERVICE_PORT", Value: "mine"},
		{Name: "FOO_URL", Value: "http://$(FOO_SVC_SERVICE_HOST):$(FOO_SVC_SERVICE_PORT_HTTP)"},
	}
	runningNetPod(t, p)
	env := envOfPod(t, ns, "links")
	ip, kip := foo.Spec.ClusterIP, master.Spec.ClusterIP
	want := map[string]string{
		"FOO_SVC_SERVICE_HOST":          ip,
		"FOO_SVC_SERVICE_PORT":          "mine",
		"FOO_SVC_SERVICE_PORT_HTTP":     "80",
		"FOO_SVC_SERVICE_PORT_DNS":      "53",
		"FOO_SVC_PORT":                  "tcp://" + ip + ":80",
		"FOO_SVC_PORT_80_TCP":           "tcp://" + ip + ":80",
		"FOO_SVC_PORT_80_TCP_PROTO":     "tcp",
		"FOO_SVC_PORT_80_TCP_PORT":      "80",
		"FOO_SVC_PORT_80_TCP_ADDR":      ip,
		"FOO_SVC_PORT_53_UDP":           "udp://" + ip + ":53",
		"FOO_SVC_PORT_53_UDP_PROTO":     "udp",
		"FOO_SVC_PORT_53_UDP_PORT":      "53",
		"FOO_SVC_PORT_53_UDP_ADDR":      ip,
		"FOO_URL":                       "http://" + ip + ":80",
		"KUBERNETES_SERVICE_HOST":       kip,
		"KUBERNETES_SERVICE_PORT":       "443",
		"KUBERNETES_SERVICE_PORT_HTTPS": "443",
		"KUBERNETES_PORT":               "tcp://" + kip + ":443",
		"KUBERNETES_PORT_443_TCP":       "tcp://" + kip + ":443",
		"KUBERNETES_PORT_443_TCP_ADDR":  kip,
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if got := withPrefix(env, "HEADLESS_"); len(got) != 0 {
		t.Errorf("a headless service gave variables: %v", got)
	}

	off := netPod(ns, "links-off")
	off.Spec.EnableServiceLinks = ptr.To(false)
	runningNetPod(t, off)
	env = envOfPod(t, ns, "links-off")
	if got := withPrefix(env, "FOO_SVC_"); len(got) != 0 {
		t.Errorf("enableServiceLinks false, yet the namespace's service gave %v", got)
	}
	if env["KUBERNETES_SERVICE_HOST"] != kip || env["KUBERNETES_SERVICE_PORT"] != "443" {
		t.Errorf("enableServiceLinks false: KUBERNETES_SERVICE_HOST=%q PORT=%q, want the master service's %s 443", env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"], kip)
	}
}
