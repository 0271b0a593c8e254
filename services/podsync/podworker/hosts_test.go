package podworker

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeServices is a service cache that syncs when told.
type fakeServices struct {
	mu       sync.Mutex
	synced   bool
	services []*corev1.Service
}

func (f *fakeServices) List() ([]*corev1.Service, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.services, nil
}

func (f *fakeServices) HasSynced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced
}

func (f *fakeServices) sync() {
	f.mu.Lock()
	f.synced = true
	f.mu.Unlock()
}

// newNodeHarness is a harness whose workers have a pods directory, a node hosts file and
// the given services.
func newNodeHarness(t *testing.T, services Services) (h *harness, podsDir, nodeHosts string) {
	t.Helper()
	h = newHarness(t, newMemCRI("busybox:1"))
	podsDir = t.TempDir()
	nodeHosts = filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(nodeHosts, []byte("127.0.0.1\tlocalhost\n192.0.2.7\tthe-node\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Set before the first Update: the workers read them after.
	h.m.o.CRI.PodsDir, h.m.o.CRI.ClusterDomain = podsDir, "cluster.local"
	h.m.o.NodeHostsFile = nodeHosts
	if services != nil {
		h.m.o.Services = services
	}
	return h, podsDir, nodeHosts
}

// containerCfg is the config the named container was created with.
func (f *memCRI) containerCfg(name string) *runtimeapi.ContainerConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.containers {
		if c.cfg.GetMetadata().GetName() == name {
			return c.cfg
		}
	}
	return nil
}

func hostsMount(cfg *runtimeapi.ContainerConfig) *runtimeapi.Mount {
	for _, m := range cfg.GetMounts() {
		if m.ContainerPath == "/etc/hosts" {
			return m
		}
	}
	return nil
}

func TestEtcHostsIsWrittenMountedAndRemoved(t *testing.T) {
	h, podsDir, _ := newNodeHarness(t, nil)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app", "own")
	pod.Spec.TerminationGracePeriodSeconds = new(int64)
	pod.Spec.Hostname, pod.Spec.Subdomain = "db-0", "db"
	pod.Spec.HostAliases = []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"foo.local", "bar.local"}}}
	pod.Spec.Containers[1].VolumeMounts = []corev1.VolumeMount{{Name: "hosts", MountPath: "/etc/hosts"}}
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "both running", func(o Observed) bool { return isRunning(o, "app") && isRunning(o, "own") })

	file := filepath.Join(podsDir, string(pod.UID), "etc-hosts")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Kubernetes-managed hosts file.\n" +
		"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n" +
		"10.0.0.9\tdb-0.db.default.svc.cluster.local\tdb-0\n" +
		"\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n"
	if string(b) != want {
		t.Errorf("hosts file\n%q\nwant\n%q", b, want)
	}
	if st, _ := os.Stat(file); st.Mode().Perm() != 0o644 {
		t.Errorf("hosts file mode %v, want 0644", st.Mode().Perm())
	}
	if m := hostsMount(h.cri.containerCfg("app")); m == nil || m.HostPath != file || m.Readonly {
		t.Errorf("app's /etc/hosts mount %v, want %s read-write", m, file)
	}
	if m := hostsMount(h.cri.containerCfg("own")); m != nil {
		t.Errorf("a container mounting its own /etc/hosts got podsync's too: %v", m)
	}

	h.m.Terminate(pod.UID, nil, "", "")
	h.ev.waitFor(t, "removed", func(o Observed) bool { return o.Removed })
	if _, err := os.Stat(filepath.Join(podsDir, string(pod.UID))); !os.IsNotExist(err) {
		t.Errorf("the pod's directory is still there after the pod was removed: %v", err)
	}
}

func TestEtcHostsOfAHostNetworkPod(t *testing.T) {
	h, podsDir, _ := newNodeHarness(t, nil)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	pod.Spec.HostNetwork = true
	pod.Spec.HostAliases = []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"foo.local"}}}
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })
	b, err := os.ReadFile(filepath.Join(podsDir, string(pod.UID), "etc-hosts"))
	if err != nil {
		t.Fatal(err)
	}
	want := "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n192.0.2.7\tthe-node\n" +
		"\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\n"
	if string(b) != want {
		t.Errorf("hosts file\n%q\nwant\n%q", b, want)
	}
	if hostsMount(h.cri.containerCfg("app")) == nil {
		t.Errorf("no /etc/hosts mount for the host-network pod's container")
	}
}

func TestServiceLinksWaitForTheServicesOfAPIPods(t *testing.T) {
	services := &fakeServices{services: []*corev1.Service{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.1", Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}}}
	h, _, _ := newNodeHarness(t, services)

	static := syncPod(corev1.RestartPolicyAlways, nil, "static")
	h.m.Update(static, "file")
	api := syncPod(corev1.RestartPolicyAlways, nil, "app")
	h.m.Update(api, "api")

	o := h.ev.waitFor(t, "app waiting for the services", func(o Observed) bool {
		w := statusOf(o, "app").State.Waiting
		return w != nil && w.Reason == "CreateContainerConfigError"
	})
	const msg = "services have not yet been read at least once, cannot construct envvars"
	if got := statusOf(o, "app").State.Waiting.Message; got != msg {
		t.Errorf("waiting message %q, want %q", got, msg)
	}
	if !h.ev.hasEvent("Failed: Error: " + msg) {
		t.Errorf("no Failed event with the kubelet's message")
	}
	// A static pod does not wait.
	h.ev.waitFor(t, "static running", func(o Observed) bool { return isRunning(o, "static") })

	services.sync()
	h.m.Trigger(api.UID)
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	var env []string
	for _, kv := range h.cri.containerCfg("app").GetEnvs() {
		env = append(env, kv.Key+"="+string(kv.Value))
	}
	if !strings.Contains(strings.Join(env, "\n"), "KUBERNETES_SERVICE_HOST=10.96.0.1\n") {
		t.Errorf("app's env %v lacks KUBERNETES_SERVICE_HOST", env)
	}
}

// SweepPodDirs removes a gone pod's directory that holds only podsync's files and empty
// volume directories; it keeps one whose volumes are not released yet (removing only
// podsync's files from it), one whose pod may not go, and one made after its listing.
func TestSweepPodDirs(t *testing.T) {
	dir := t.TempDir()
	write := func(path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("gone/etc-hosts")
	write("gone/containers/main/0123")
	if err := os.MkdirAll(filepath.Join(dir, "gone", "volumes"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("gone-with-volume/etc-hosts")
	write("gone-with-volume/volumes/kubernetes.io~secret/sec/k")
	write("kept/etc-hosts")
	asked := false
	removed, err := SweepPodDirs(dir, func() func(types.UID) bool {
		asked = true
		write("new/etc-hosts") // a pod admitted after the listing
		return func(uid types.UID) bool { return uid != "kept" }
	})
	if err != nil || !asked {
		t.Fatalf("SweepPodDirs: %v (asked %v)", err, asked)
	}
	if want := []string{filepath.Join(dir, "gone")}; !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	for path, want := range map[string]bool{
		"gone": false, "gone-with-volume/etc-hosts": false, "gone-with-volume/volumes/kubernetes.io~secret/sec/k": true,
		"kept/etc-hosts": true, "new/etc-hosts": true,
	} {
		if _, err := os.Stat(filepath.Join(dir, path)); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", path, err == nil, want)
		}
	}
	if removed, err := SweepPodDirs(filepath.Join(dir, "none"), func() func(types.UID) bool { return nil }); err != nil || removed != nil {
		t.Errorf("a missing pods directory: %q, %v", removed, err)
	}
}
