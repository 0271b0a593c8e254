package nodestatus

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

const testNode = "node-a"

// fakeRuntime is podsync's health as a test sets it.
type fakeRuntime struct {
	mu     sync.Mutex
	health *podsyncv1.RuntimeHealth
	err    error
	calls  int
}

func healthy() *podsyncv1.RuntimeHealth {
	return &podsyncv1.RuntimeHealth{RuntimeReady: true, NetworkReady: true, RelistHealthy: true, RuntimeName: "containerd", RuntimeVersion: "1.7.24"}
}

func (f *fakeRuntime) RuntimeHealth(context.Context) (*podsyncv1.RuntimeHealth, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return f.health, nil
}

func (f *fakeRuntime) set(h *podsyncv1.RuntimeHealth, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.health, f.err = h, err
}

type fakePressure struct {
	conds []corev1.NodeCondition
	err   error
}

func (f *fakePressure) Pressure(context.Context) ([]corev1.NodeCondition, error) {
	return f.conds, f.err
}

type fakeImages []corev1.ContainerImage

func (f fakeImages) Images(context.Context) ([]corev1.ContainerImage, error) { return f, nil }

// builtNode is what shared/nodeinfo.Node gives, in small.
func builtNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: testNode,
			Labels: map[string]string{
				corev1.LabelHostname: testNode, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
				"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "pool": "blue",
			},
			Annotations: map[string]string{attachDetachAnnotation: "true"},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "unitlet.io/new", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
				corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("20Gi"),
				"hugepages-2Mi": resource.MustParse("0"),
			},
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("3900Mi"),
				corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("18Gi"),
				"hugepages-2Mi": resource.MustParse("0"),
			},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}, {Type: corev1.NodeHostName, Address: testNode}},
			NodeInfo:  corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
}

// harness is a Controller over a fake clientset, a fake clock and fake sources.
type harness struct {
	c        *Controller
	client   *fake.Clientset
	clock    *testingclock.FakeClock
	runtime  *fakeRuntime
	recorder *record.FakeRecorder
	registry *prometheus.Registry
	services error
	mu       sync.Mutex
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newHarness(t *testing.T, edit func(*Options), objects ...runtime.Object) *harness {
	t.Helper()
	h := &harness{
		client:   fake.NewClientset(objects...),
		clock:    testingclock.NewFakeClock(t0),
		runtime:  &fakeRuntime{health: healthy()},
		recorder: record.NewFakeRecorder(100),
		registry: prometheus.NewRegistry(),
	}
	// The API server gives a created node a UID; the fake tracker does not.
	h.client.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*corev1.Node).UID = "uid-" + testNode
		return false, nil, nil
	})
	o := Options{
		Client:   h.client,
		NodeName: testNode,
		Build:    func() (*corev1.Node, error) { return builtNode(), nil },
		Runtime:  h.runtime,
		Services: func(context.Context) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.services
		},
		Images: fakeImages{
			{Names: []string{"small"}, SizeBytes: 10},
			{Names: []string{"big@sha256:1", "big:1", "big:2", "big:3", "big:4", "big:5"}, SizeBytes: 1000},
			{Names: []string{"mid"}, SizeBytes: 100},
		},
		Recorder: h.recorder,
		Clock:    h.clock,
		Registry: h.registry,
	}
	if edit != nil {
		edit(&o)
	}
	c, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c.host = testHost(t)
	h.c = c
	return h
}

func (h *harness) setServices(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.services = err
}

// testHost writes the identity files a node has.
func testHost(t *testing.T) hostFiles {
	t.Helper()
	root := t.TempDir()
	for name, content := range map[string]string{
		"etc/machine-id":                 "0123456789abcdef0123456789abcdef\n",
		"sys/class/dmi/id/product_uuid":  "4C4C4544-0000-1010-8000-B1C04F333532\n",
		"proc/sys/kernel/random/boot_id": "b3f0c1de-1111-2222-3333-444455556666\n",
		"proc/sys/kernel/osrelease":      "6.1.0-18-amd64\n",
		"etc/os-release":                 "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return hostFiles{root: root}
}

func (h *harness) node(t *testing.T) *corev1.Node {
	t.Helper()
	n, err := h.client.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	return n
}

// statusPatches counts the patches of the node's status subresource so far.
func (h *harness) statusPatches() int {
	n := 0
	for _, a := range h.client.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

// events drains the recorded events.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func condition(t *testing.T, n *corev1.Node, typ corev1.NodeConditionType) corev1.NodeCondition {
	t.Helper()
	for _, c := range n.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	t.Fatalf("node has no %s condition: %+v", typ, n.Status.Conditions)
	return corev1.NodeCondition{}
}

// counter reads a counter's value from the registry.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					if m.GetCounter() != nil {
						return m.GetCounter().GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no metric %s{%s=%q}", name, label, value)
	return 0
}

func containsAll(t *testing.T, got []string, want ...string) {
	t.Helper()
	joined := strings.Join(got, "\n")
	for _, w := range want {
		if !strings.Contains(joined, w) {
			t.Errorf("events %q lack %q", got, w)
		}
	}
}

var errDown = errors.New("dial unix /run/unitlet/podsync.sock: connect: no such file or directory")

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkMapping checks f's output for each input.
func checkMapping(t *testing.T, name string, f func(string) string, want map[string]string) {
	t.Helper()
	for in, w := range want {
		if got := f(in); got != w {
			t.Errorf("%s(%q) = %q, want %q", name, in, got, w)
		}
	}
}
