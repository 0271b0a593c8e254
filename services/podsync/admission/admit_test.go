package admission

import (
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const nodeName = "node-a"

// otherOS is an OS this test does not run on.
func otherOS() string {
	if runtime.GOOS == "windows" {
		return "linux"
	}
	return "windows"
}

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func testNode(mutate ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{
			"kubernetes.io/hostname": nodeName, "kubernetes.io/os": runtime.GOOS, "zone": "a",
		}},
		Status: corev1.NodeStatus{Allocatable: rl(
			"cpu", "2", "memory", "4Gi", "ephemeral-storage", "10Gi", "pods", "110",
			"hugepages-2Mi", "64Mi", "example.com/gpu", "1",
		)},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

type podOpt func(*corev1.Pod)

func testPod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// requests sets the requests of the first app container.
func requests(kv ...string) podOpt {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests = rl(kv...) }
}

func container(name string, kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
			Name: name, Resources: corev1.ResourceRequirements{Requests: rl(kv...)},
		})
	}
}

func initContainer(name string, sidecar bool, kv ...string) podOpt {
	return func(p *corev1.Pod) {
		c := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: rl(kv...)}}
		if sidecar {
			c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	}
}

func annotate(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

var (
	static = annotate("kubernetes.io/config.source", "file")
	mirror = annotate("kubernetes.io/config.mirror", "abc")
)

func priority(v int32) podOpt { return func(p *corev1.Pod) { p.Spec.Priority = ptr.To(v) } }

type admitCase struct {
	name    string
	pod     *corev1.Pod
	node    *corev1.Node // testNode() when nil
	active  []*corev1.Pod
	maxPods int
	sysctls *Sysctls // nil: the safe sysctls of this kernel

	admit     bool
	reason    string
	message   string // checked when not empty
	shortfall []corev1.ResourceName
}

func runAdmit(t *testing.T, tests []admitCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := tt.node
			if node == nil {
				node = testNode()
			}
			got := Admit(tt.pod, node, tt.active, tt.maxPods, tt.sysctls, Runtime{})
			if got.Admit != tt.admit || got.Reason != tt.reason {
				t.Fatalf("Admit = {%v %q %q}, want {%v %q}", got.Admit, got.Reason, got.Message, tt.admit, tt.reason)
			}
			if tt.message != "" && got.Message != tt.message {
				t.Errorf("message = %q, want %q", got.Message, tt.message)
			}
			if tt.admit && got.Message != "" {
				t.Errorf("admitted with message %q", got.Message)
			}
			if len(got.Shortfall) != len(tt.shortfall) {
				t.Fatalf("shortfall = %v, want %v", got.Shortfall, tt.shortfall)
			}
			for i, name := range tt.shortfall {
				if got.Shortfall[i].Resource != name {
					t.Errorf("shortfall[%d] = %v, want %s", i, got.Shortfall[i], name)
				}
			}
		})
	}
}

func TestAdmitNodeName(t *testing.T) {
	runAdmit(t, []admitCase{
		{name: "same node", pod: testPod("p"), admit: true},
		{name: "no node name", pod: testPod("p", func(p *corev1.Pod) { p.Spec.NodeName = "" }), admit: true},
		{
			name: "other node", pod: testPod("p", func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }),
			reason:  "NodeName",
			message: "Predicate NodeName failed: node(s) didn't match the requested node name",
		},
	})
}

func TestAdmitPodCount(t *testing.T) {
	two := []*corev1.Pod{testPod("a"), testPod("b")}
	runAdmit(t, []admitCase{
		{name: "room left", pod: testPod("p"), active: two, maxPods: 3, admit: true},
		{
			name: "full", pod: testPod("p"), active: two, maxPods: 2,
			reason: "OutOfpods", message: "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2",
		},
		{
			name: "the pod itself among the active pods is not counted", pod: testPod("a"), active: two, maxPods: 2,
			admit: true,
		},
		{
			name: "maxPods 0 takes allocatable pods", pod: testPod("p"), active: two,
			node:   testNode(func(n *corev1.Node) { n.Status.Allocatable["pods"] = resource.MustParse("2") }),
			reason: "OutOfpods",
		},
		{
			name: "static pod over the limit is admitted for preemption", pod: testPod("p", static), active: two, maxPods: 2,
			admit: true, shortfall: []corev1.ResourceName{"pods"},
		},
	})
}

func TestAdmitResources(t *testing.T) {
	used1800 := []*corev1.Pod{testPod("a", requests("cpu", "1", "memory", "1Gi")), testPod("b", requests("cpu", "800m"))}
	runAdmit(t, []admitCase{
		{name: "fits", pod: testPod("p", requests("cpu", "200m")), active: used1800, admit: true},
		{
			name: "cpu", pod: testPod("p", requests("cpu", "500m")), active: used1800,
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 500, used: 1800, capacity: 2000",
		},
		{
			name: "memory", pod: testPod("p", requests("memory", "3221225473")), active: used1800,
			reason: "OutOfmemory", message: "Node didn't have enough resource: memory, requested: 3221225473, used: 1073741824, capacity: 4294967296",
		},
		{
			name: "ephemeral-storage", pod: testPod("p", requests("ephemeral-storage", "11Gi")),
			reason: "OutOfephemeral-storage",
		},
		{
			name: "huge pages", pod: testPod("p", requests("hugepages-2Mi", "128Mi", "memory", "128Mi")),
			reason: "OutOfhugepages-2Mi", message: "Node didn't have enough resource: hugepages-2Mi, requested: 134217728, used: 0, capacity: 67108864",
		},
		{
			name: "huge pages the node has none of", pod: testPod("p", requests("hugepages-1Gi", "1Gi", "memory", "1Gi")),
			reason: "OutOfhugepages-1Gi",
		},
		{
			name: "extended resource in use", pod: testPod("p", requests("example.com/gpu", "1")),
			active: []*corev1.Pod{testPod("a", requests("example.com/gpu", "1"))},
			reason: "OutOfexample.com/gpu", message: "Node didn't have enough resource: example.com/gpu, requested: 1, used: 1, capacity: 1",
		},
		{
			name: "extended resource the node does not know is ignored", pod: testPod("p", requests("other.io/fpga", "4")),
			admit: true,
		},
		{
			name: "cpu is reported before memory", pod: testPod("p", requests("cpu", "3", "memory", "5Gi")),
			reason: "OutOfcpu",
		},
		{
			name: "zero requests fit a node with nothing left", pod: testPod("p"),
			active: []*corev1.Pod{testPod("a", requests("cpu", "2", "memory", "4Gi"))}, admit: true,
		},
		{
			name: "zero requests fit an overcommitted node", pod: testPod("p", requests("cpu", "0")),
			active: []*corev1.Pod{testPod("a", requests("cpu", "3"))}, admit: true,
		},
		{
			name:   "init container larger than the app containers' sum counts alone",
			pod:    testPod("p", requests("cpu", "300m"), container("b", "cpu", "300m"), initContainer("init", false, "cpu", "1500m")),
			active: []*corev1.Pod{testPod("a", requests("cpu", "1"))},
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000",
		},
		{
			name:   "app containers' sum larger than the init container counts",
			pod:    testPod("p", requests("cpu", "600m"), container("b", "cpu", "600m"), initContainer("init", false, "cpu", "100m")),
			active: []*corev1.Pod{testPod("a", requests("cpu", "1"))},
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 1200, used: 1000, capacity: 2000",
		},
		{
			name:   "init container at the max fits",
			pod:    testPod("p", requests("cpu", "300m"), initContainer("init", false, "cpu", "1")),
			active: []*corev1.Pod{testPod("a", requests("cpu", "1"))}, admit: true,
		},
		{
			name:   "sidecar adds to the app containers",
			pod:    testPod("p", requests("cpu", "600m"), initContainer("sidecar", true, "cpu", "500m")),
			active: []*corev1.Pod{testPod("a", requests("cpu", "1"))},
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 1100, used: 1000, capacity: 2000",
		},
		{
			name: "overhead is added",
			pod: testPod("p", requests("cpu", "1"), func(p *corev1.Pod) {
				p.Spec.Overhead = rl("cpu", "250m")
			}),
			active: []*corev1.Pod{testPod("a", requests("cpu", "800m"))},
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 1250, used: 800, capacity: 2000",
		},
		{
			name: "active pods' overhead is used",
			pod:  testPod("p", requests("cpu", "1")),
			active: []*corev1.Pod{testPod("a", requests("cpu", "800m"), func(p *corev1.Pod) {
				p.Spec.Overhead = rl("cpu", "400m")
			})},
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 1000, used: 1200, capacity: 2000",
		},
		{
			name: "pod-level requests",
			pod: testPod("p", requests("cpu", "100m"), func(p *corev1.Pod) {
				p.Spec.Resources = &corev1.ResourceRequirements{Requests: rl("cpu", "1500m")}
			}),
			active: []*corev1.Pod{testPod("a", requests("cpu", "1"))},
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000",
		},
		{
			name: "static pod short of cpu is admitted for preemption", pod: testPod("p", static, requests("cpu", "500m", "memory", "4Gi")),
			active: used1800, admit: true, shortfall: []corev1.ResourceName{"cpu", "memory"},
		},
		{
			name: "system-critical priority short of cpu is admitted for preemption", pod: testPod("p", priority(2000001000), requests("cpu", "500m")),
			active: used1800, admit: true, shortfall: []corev1.ResourceName{"cpu"},
		},
		{
			name: "high but not critical priority is rejected", pod: testPod("p", priority(1000000000), requests("cpu", "500m")),
			active: used1800, reason: "OutOfcpu",
		},
		{
			name:   "static pod short of cpu on the wrong node reports the node",
			pod:    testPod("p", static, requests("cpu", "500m"), func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }),
			active: used1800, reason: "NodeName",
		},
	})
}

func TestAdmitNodeAffinity(t *testing.T) {
	required := func(op corev1.NodeSelectorOperator, values ...string) podOpt {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
						{Key: "zone", Operator: op, Values: values},
					}}},
				},
			}}
		}
	}
	selector := func(kv ...string) podOpt {
		return func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{}
			for i := 0; i < len(kv); i += 2 {
				p.Spec.NodeSelector[kv[i]] = kv[i+1]
			}
		}
	}
	const msg = "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
	runAdmit(t, []admitCase{
		{name: "node selector matches", pod: testPod("p", selector("zone", "a")), admit: true},
		{name: "node selector does not match", pod: testPod("p", selector("zone", "b")), reason: "NodeAffinity", message: msg},
		{name: "node selector on a missing label", pod: testPod("p", selector("disk", "ssd")), reason: "NodeAffinity"},
		{name: "required In matches", pod: testPod("p", required(corev1.NodeSelectorOpIn, "a", "b")), admit: true},
		{name: "required In does not match", pod: testPod("p", required(corev1.NodeSelectorOpIn, "b")), reason: "NodeAffinity", message: msg},
		{name: "required NotIn", pod: testPod("p", required(corev1.NodeSelectorOpNotIn, "a")), reason: "NodeAffinity"},
		{name: "both must hold", pod: testPod("p", selector("zone", "b"), required(corev1.NodeSelectorOpIn, "a")), reason: "NodeAffinity"},
		{
			name: "preferred affinity alone never rejects",
			pod: testPod("p", func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
						Weight: 1, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
							{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}},
						}},
					}},
				}}
			}),
			admit: true,
		},
		{name: "resources are reported before affinity", pod: testPod("p", selector("zone", "b"), requests("cpu", "3")), reason: "OutOfcpu"},
	})
}

func TestAdmitHostPorts(t *testing.T) {
	port := func(ip string, proto corev1.Protocol, hostPort int32) podOpt {
		return func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: 80, HostIP: ip, Protocol: proto, HostPort: hostPort})
		}
	}
	initPort := func(sidecar bool, hostPort int32) podOpt {
		return func(p *corev1.Pod) {
			c := corev1.Container{Name: "init", Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: hostPort}}}
			if sidecar {
				c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
			}
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		}
	}
	holding := func(opts ...podOpt) []*corev1.Pod { return []*corev1.Pod{testPod("holder", opts...)} }
	const msg = "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
	runAdmit(t, []admitCase{
		{name: "free port", pod: testPod("p", port("", "TCP", 8080)), active: holding(port("", "TCP", 8081)), admit: true},
		{name: "same port, all addresses", pod: testPod("p", port("", "TCP", 8080)), active: holding(port("", "TCP", 8080)), reason: "NodePorts", message: msg},
		{name: "0.0.0.0 wanted, specific IP held", pod: testPod("p", port("0.0.0.0", "TCP", 8080)), active: holding(port("10.0.0.1", "TCP", 8080)), reason: "NodePorts"},
		{name: "specific IP wanted, 0.0.0.0 held", pod: testPod("p", port("10.0.0.1", "TCP", 8080)), active: holding(port("", "TCP", 8080)), reason: "NodePorts"},
		{name: "same specific IP", pod: testPod("p", port("10.0.0.1", "TCP", 8080)), active: holding(port("10.0.0.1", "TCP", 8080)), reason: "NodePorts"},
		{name: "different specific IPs", pod: testPod("p", port("10.0.0.1", "TCP", 8080)), active: holding(port("10.0.0.2", "TCP", 8080)), admit: true},
		{name: "UDP and TCP on the same port", pod: testPod("p", port("", "UDP", 53)), active: holding(port("", "TCP", 53)), admit: true},
		{name: "UDP on both", pod: testPod("p", port("", "UDP", 53)), active: holding(port("", "UDP", 53)), reason: "NodePorts"},
		{name: "empty protocol is TCP", pod: testPod("p", port("", "", 8080)), active: holding(port("", "TCP", 8080)), reason: "NodePorts"},
		{name: "no host port", pod: testPod("p", port("", "TCP", 0)), active: holding(port("", "TCP", 0)), admit: true},
		{name: "sidecar port is held", pod: testPod("p", port("", "TCP", 8080)), active: holding(initPort(true, 8080)), reason: "NodePorts"},
		{name: "sidecar port is wanted", pod: testPod("p", initPort(true, 8080)), active: holding(port("", "TCP", 8080)), reason: "NodePorts"},
		{name: "plain init container port is not held", pod: testPod("p", port("", "TCP", 8080)), active: holding(initPort(false, 8080)), admit: true},
		{
			name: "the pod itself is not a holder",
			pod:  testPod("holder", port("", "TCP", 8080)), active: holding(port("", "TCP", 8080)), admit: true,
		},
	})
}

func TestAdmitTaints(t *testing.T) {
	tainted := func(taints ...corev1.Taint) *corev1.Node {
		return testNode(func(n *corev1.Node) { n.Spec.Taints = taints })
	}
	tolerate := func(tols ...corev1.Toleration) podOpt {
		return func(p *corev1.Pod) { p.Spec.Tolerations = tols }
	}
	noExec := corev1.Taint{Key: "drain", Value: "yes", Effect: corev1.TaintEffectNoExecute}
	noSched := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	const msg = "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
	runAdmit(t, []admitCase{
		{name: "untolerated NoExecute", pod: testPod("p"), node: tainted(noExec), reason: "TaintToleration", message: msg},
		{name: "untolerated NoSchedule is ignored", pod: testPod("p"), node: tainted(noSched), admit: true},
		{
			name: "Equal with the value", node: tainted(noExec),
			pod:   testPod("p", tolerate(corev1.Toleration{Key: "drain", Operator: corev1.TolerationOpEqual, Value: "yes", Effect: corev1.TaintEffectNoExecute})),
			admit: true,
		},
		{
			name: "Equal with another value", node: tainted(noExec),
			pod:    testPod("p", tolerate(corev1.Toleration{Key: "drain", Operator: corev1.TolerationOpEqual, Value: "no"})),
			reason: "TaintToleration",
		},
		{
			name: "Exists on the key", node: tainted(noExec),
			pod:   testPod("p", tolerate(corev1.Toleration{Key: "drain", Operator: corev1.TolerationOpExists})),
			admit: true,
		},
		{
			name: "Exists on another key", node: tainted(noExec),
			pod:    testPod("p", tolerate(corev1.Toleration{Key: "other", Operator: corev1.TolerationOpExists})),
			reason: "TaintToleration",
		},
		{
			name: "Exists with no key tolerates everything", node: tainted(noExec, corev1.Taint{Key: "x", Effect: corev1.TaintEffectNoExecute}),
			pod:   testPod("p", tolerate(corev1.Toleration{Operator: corev1.TolerationOpExists})),
			admit: true,
		},
		{
			name: "Exists for NoSchedule only", node: tainted(noExec),
			pod:    testPod("p", tolerate(corev1.Toleration{Key: "drain", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})),
			reason: "TaintToleration",
		},
		{name: "static pod is exempt", pod: testPod("p", static), node: tainted(noExec), admit: true},
		{name: "pod from the API server is not static", pod: testPod("p", annotate("kubernetes.io/config.source", "api")), node: tainted(noExec), reason: "TaintToleration"},
		{name: "critical priority is not exempt", pod: testPod("p", priority(2000001000)), node: tainted(noExec), reason: "TaintToleration"},
		{name: "mirror pod is always admitted", pod: testPod("p", mirror), node: tainted(noExec), admit: true},
	})
}

func TestAdmitOS(t *testing.T) {
	osLabel := func(v string) podOpt {
		return func(p *corev1.Pod) { p.Labels = map[string]string{"kubernetes.io/os": v} }
	}
	osField := func(v string) podOpt {
		return func(p *corev1.Pod) { p.Spec.OS = &corev1.PodOS{Name: corev1.OSName(v)} }
	}
	runAdmit(t, []admitCase{
		{name: "label matches", pod: testPod("p", osLabel(runtime.GOOS)), admit: true},
		{
			name: "label differs", pod: testPod("p", osLabel(otherOS())),
			reason:  "PodOSSelectorNodeLabelDoesNotMatch",
			message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
		},
		{
			name: "node without the label is taken as this OS", pod: testPod("p", osLabel(runtime.GOOS)),
			node: testNode(func(n *corev1.Node) { delete(n.Labels, "kubernetes.io/os") }), admit: true,
		},
		{name: "field matches", pod: testPod("p", osField(runtime.GOOS)), admit: true},
		{
			name: "field differs", pod: testPod("p", osField(otherOS())),
			reason: "PodOSNotSupported", message: "Failed to admit pod as the OS field doesn't match node OS",
		},
		{name: "label is checked first", pod: testPod("p", osField(otherOS()), osLabel(otherOS())), reason: "PodOSSelectorNodeLabelDoesNotMatch"},
		{name: "OS before resources", pod: testPod("p", osField(otherOS()), requests("cpu", "5")), reason: "PodOSNotSupported"},
		{name: "static pods are checked too", pod: testPod("p", static, osField(otherOS())), reason: "PodOSNotSupported"},
	})
}

func TestAdmitSupplementalGroupsPolicy(t *testing.T) {
	policy := func(v corev1.SupplementalGroupsPolicy) podOpt {
		return func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(v)}
		}
	}
	supporting := testNode(func(n *corev1.Node) {
		n.Status.Features = &corev1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(true)}
	})
	runAdmit(t, []admitCase{
		{
			name: "Strict on a node without the feature", pod: testPod("p", policy(corev1.SupplementalGroupsPolicyStrict)),
			reason: "SupplementalGroupsPolicyNotSupported", message: "SupplementalGroupsPolicy=Strict is not supported in this node",
		},
		{name: "Strict on a node with it", pod: testPod("p", policy(corev1.SupplementalGroupsPolicyStrict)), node: supporting, admit: true},
		{name: "Merge anywhere", pod: testPod("p", policy(corev1.SupplementalGroupsPolicyMerge)), admit: true},
	})
}

func TestAdmitNoNode(t *testing.T) {
	r := Admit(testPod("p"), nil, nil, 110, nil, Runtime{})
	if r.Admit || r.Reason != "InvalidNodeInfo" {
		t.Errorf("Admit with no node = %+v, want InvalidNodeInfo", r)
	}
}

func TestReject(t *testing.T) {
	limits := func(kv ...string) podOpt {
		return func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Limits = rl(kv...) }
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		qos  corev1.PodQOSClass
	}{
		{"best effort", testPod("p"), corev1.PodQOSBestEffort},
		{"burstable", testPod("p", requests("cpu", "100m")), corev1.PodQOSBurstable},
		{"guaranteed by limits alone", testPod("p", limits("cpu", "1", "memory", "1Gi")), corev1.PodQOSBurstable},
		{"guaranteed", testPod("p", requests("cpu", "1", "memory", "1Gi"), limits("cpu", "1", "memory", "1Gi")), corev1.PodQOSGuaranteed},
		{"requests below limits", testPod("p", requests("cpu", "500m", "memory", "1Gi"), limits("cpu", "1", "memory", "1Gi")), corev1.PodQOSBurstable},
		{
			"an init container without limits",
			testPod("p", requests("cpu", "1", "memory", "1Gi"), limits("cpu", "1", "memory", "1Gi"), initContainer("i", false, "cpu", "1")),
			corev1.PodQOSBurstable,
		},
		{
			"pod-level guaranteed",
			testPod("p", func(p *corev1.Pod) {
				p.Spec.Resources = &corev1.ResourceRequirements{Requests: rl("cpu", "1", "memory", "1Gi"), Limits: rl("cpu", "1", "memory", "1Gi")}
			}),
			corev1.PodQOSGuaranteed,
		},
		{"status wins", testPod("p", func(p *corev1.Pod) { p.Status.QOSClass = corev1.PodQOSGuaranteed }), corev1.PodQOSGuaranteed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Result{Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu, requested: 500, used: 1800, capacity: 2000"}
			st := Reject(tt.pod, r)
			if st.Phase != corev1.PodFailed || st.Reason != r.Reason {
				t.Errorf("status = %+v, want phase Failed reason %s", st, r.Reason)
			}
			if want := "Pod was rejected: " + r.Message; st.Message != want {
				t.Errorf("message = %q, want %q", st.Message, want)
			}
			if st.QOSClass != tt.qos {
				t.Errorf("qosClass = %s, want %s", st.QOSClass, tt.qos)
			}
		})
	}
}

func TestInsufficient(t *testing.T) {
	i := Insufficient{Resource: "cpu", Requested: 500, Used: 1800, Capacity: 2000}
	if i.Missing() != 300 {
		t.Errorf("Missing = %d, want 300", i.Missing())
	}
	if i.Reason() != "OutOfcpu" || !strings.HasPrefix(i.Message(), "Node didn't have enough resource: cpu") {
		t.Errorf("Reason/Message = %q %q", i.Reason(), i.Message())
	}
}
