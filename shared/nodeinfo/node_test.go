package nodeinfo

import (
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

const (
	mi = int64(1) << 20
	gi = int64(1) << 30
)

func testMachine() Machine {
	return Machine{
		CPUMilli:              4000,
		MemoryBytes:           8 * gi,
		EphemeralStorageBytes: 100 * gi,
		HugePages:             map[string]int64{"2Mi": 1 * gi, "1Gi": 0},
	}
}

func TestNodeAllocatable(t *testing.T) {
	tests := []struct {
		name    string
		kc      kubeletconfigv1beta1.KubeletConfiguration
		m       Machine
		want    map[corev1.ResourceName]string // allocatable
		wantCap map[corev1.ResourceName]string // capacity, checked where given
	}{{
		name: "nothing reserved: allocatable is capacity, memory less huge pages",
		kc:   kubeletconfigv1beta1.KubeletConfiguration{MaxPods: 110},
		m:    testMachine(),
		want: map[corev1.ResourceName]string{
			"cpu": "4", "memory": "7Gi", "pods": "110", "ephemeral-storage": "100Gi",
			"hugepages-2Mi": "1Gi", "hugepages-1Gi": "0",
		},
		wantCap: map[corev1.ResourceName]string{
			"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi",
			"hugepages-2Mi": "1Gi", "hugepages-1Gi": "0",
		},
	}, {
		name: "system and kube reserved plus eviction quantities add up",
		kc: kubeletconfigv1beta1.KubeletConfiguration{
			MaxPods:        110,
			SystemReserved: map[string]string{"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "10Gi", "pid": "100"},
			KubeReserved:   map[string]string{"cpu": "250m", "memory": "512Mi"},
			EvictionHard:   map[string]string{"memory.available": "100Mi", "nodefs.available": "5Gi"},
		},
		m: testMachine(),
		want: map[corev1.ResourceName]string{
			"cpu": "3250m", "pods": "110", "ephemeral-storage": "85Gi",
			// 8Gi - 1Gi - 512Mi - 100Mi - 1Gi of huge pages
			"memory": resource.NewQuantity(8*gi-gi-512*mi-100*mi-gi, resource.BinarySI).String(),
		},
	}, {
		name: "eviction percentages are taken of capacity",
		kc: kubeletconfigv1beta1.KubeletConfiguration{
			MaxPods:      110,
			EvictionHard: map[string]string{"memory.available": "25%", "nodefs.available": "12.5%"},
		},
		m: Machine{CPUMilli: 2000, MemoryBytes: 8 * gi, EphemeralStorageBytes: 80 * gi},
		want: map[corev1.ResourceName]string{
			"cpu": "2", "memory": "6Gi", "ephemeral-storage": "70Gi",
		},
	}, {
		name: "0% and 100% switch a threshold off; other signals reserve nothing",
		kc: kubeletconfigv1beta1.KubeletConfiguration{
			MaxPods: 110,
			EvictionHard: map[string]string{
				"memory.available": "0%", "nodefs.available": "100%",
				"imagefs.available": "15%", "nodefs.inodesFree": "5%", "pid.available": "10%",
			},
		},
		m:    Machine{CPUMilli: 2000, MemoryBytes: 8 * gi, EphemeralStorageBytes: 80 * gi},
		want: map[corev1.ResourceName]string{"memory": "8Gi", "ephemeral-storage": "80Gi"},
	}, {
		name: "reservations beyond capacity floor at zero",
		kc: kubeletconfigv1beta1.KubeletConfiguration{
			MaxPods:        110,
			SystemReserved: map[string]string{"cpu": "3", "memory": "6Gi"},
			KubeReserved:   map[string]string{"cpu": "2"},
			EvictionHard:   map[string]string{"nodefs.available": "200Gi"},
		},
		m:    testMachine(),
		want: map[corev1.ResourceName]string{"cpu": "0", "memory": "1Gi", "ephemeral-storage": "0"},
	}, {
		name: "huge pages larger than what is left of memory floor memory at zero",
		kc: kubeletconfigv1beta1.KubeletConfiguration{
			MaxPods:        110,
			SystemReserved: map[string]string{"memory": "7Gi"},
			EvictionHard:   map[string]string{"memory.available": "100Mi"},
		},
		m:    testMachine(),
		want: map[corev1.ResourceName]string{"memory": "0", "hugepages-2Mi": "1Gi"},
	}, {
		name:    "podsPerCore lowers maxPods to cores times podsPerCore",
		kc:      kubeletconfigv1beta1.KubeletConfiguration{MaxPods: 110, PodsPerCore: 10},
		m:       testMachine(),
		want:    map[corev1.ResourceName]string{"pods": "40"},
		wantCap: map[corev1.ResourceName]string{"pods": "40"},
	}, {
		name: "podsPerCore above maxPods leaves maxPods",
		kc:   kubeletconfigv1beta1.KubeletConfiguration{MaxPods: 30, PodsPerCore: 10},
		m:    testMachine(),
		want: map[corev1.ResourceName]string{"pods": "30"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node, err := Node(&tt.kc, Identity{Name: "node-a"}, tt.m)
			if err != nil {
				t.Fatalf("Node: %v", err)
			}
			checkList(t, "allocatable", node.Status.Allocatable, tt.want)
			checkList(t, "capacity", node.Status.Capacity, tt.wantCap)
		})
	}
}

func checkList(t *testing.T, what string, got corev1.ResourceList, want map[corev1.ResourceName]string) {
	t.Helper()
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s[%s] missing, want %s", what, name, w)
			continue
		}
		if wq := resource.MustParse(w); g.Cmp(wq) != 0 {
			t.Errorf("%s[%s] = %s, want %s", what, name, g.String(), w)
		}
	}
}

func TestNodeIdentity(t *testing.T) {
	kc := &kubeletconfigv1beta1.KubeletConfiguration{MaxPods: 110, ProviderID: "unitlet://node-a"}
	taints := []corev1.Taint{
		{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.example.com/drain", Effect: corev1.TaintEffectNoExecute},
	}
	tests := []struct {
		name       string
		id         Identity
		wantLabels map[string]string
		wantAddrs  []corev1.NodeAddress
	}{{
		name: "defaults",
		id:   Identity{Name: "node-a"},
		wantLabels: map[string]string{
			"kubernetes.io/hostname": "node-a",
			"kubernetes.io/os":       runtime.GOOS, "kubernetes.io/arch": runtime.GOARCH,
			"beta.kubernetes.io/os": runtime.GOOS, "beta.kubernetes.io/arch": runtime.GOARCH,
		},
		wantAddrs: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "node-a"}},
	}, {
		name: "identity labels add to and override the defaults; IPs become InternalIP",
		id: Identity{
			Name: "node-a", Hostname: "host-a", IPs: []string{"10.0.0.5", "fd00::5"},
			Labels: map[string]string{"kubernetes.io/hostname": "custom", "node-role.kubernetes.io/worker": ""},
			Taints: taints,
		},
		wantLabels: map[string]string{
			"kubernetes.io/hostname":         "custom",
			"node-role.kubernetes.io/worker": "",
			"kubernetes.io/os":               runtime.GOOS,
		},
		wantAddrs: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.0.0.5"},
			{Type: corev1.NodeInternalIP, Address: "fd00::5"},
			{Type: corev1.NodeHostName, Address: "host-a"},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node, err := Node(kc, tt.id, testMachine())
			if err != nil {
				t.Fatalf("Node: %v", err)
			}
			if node.Name != tt.id.Name {
				t.Errorf("name = %q, want %q", node.Name, tt.id.Name)
			}
			for k, v := range tt.wantLabels {
				if got, ok := node.Labels[k]; !ok || got != v {
					t.Errorf("label %s = %q (present %v), want %q", k, got, ok, v)
				}
			}
			if len(node.Status.Addresses) != len(tt.wantAddrs) {
				t.Fatalf("addresses = %v, want %v", node.Status.Addresses, tt.wantAddrs)
			}
			for i := range tt.wantAddrs {
				if node.Status.Addresses[i] != tt.wantAddrs[i] {
					t.Errorf("addresses[%d] = %v, want %v", i, node.Status.Addresses[i], tt.wantAddrs[i])
				}
			}
			if len(node.Spec.Taints) != len(tt.id.Taints) {
				t.Fatalf("taints = %v, want %v", node.Spec.Taints, tt.id.Taints)
			}
			for i := range tt.id.Taints {
				if !node.Spec.Taints[i].MatchTaint(&tt.id.Taints[i]) || node.Spec.Taints[i].Value != tt.id.Taints[i].Value {
					t.Errorf("taints[%d] = %v, want %v", i, node.Spec.Taints[i], tt.id.Taints[i])
				}
			}
			if node.Spec.ProviderID != kc.ProviderID {
				t.Errorf("providerID = %q, want %q", node.Spec.ProviderID, kc.ProviderID)
			}
			if node.Annotations[AttachDetachAnnotation] != "true" {
				t.Errorf("annotation %s = %q, want true", AttachDetachAnnotation, node.Annotations[AttachDetachAnnotation])
			}
		})
	}
}

func TestNodeTaintsAreCopied(t *testing.T) {
	id := Identity{Name: "node-a", Taints: []corev1.Taint{{Key: "a", Effect: corev1.TaintEffectNoSchedule}}}
	node, err := Node(&kubeletconfigv1beta1.KubeletConfiguration{MaxPods: 1}, id, testMachine())
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints[0].Key = "changed"
	if id.Taints[0].Key != "a" {
		t.Errorf("Node shares the identity's taint slice")
	}
}

func TestNodeWithoutAttachDetach(t *testing.T) {
	kc := &kubeletconfigv1beta1.KubeletConfiguration{MaxPods: 110, EnableControllerAttachDetach: ptr.To(false)}
	node, err := Node(kc, Identity{Name: "node-a"}, testMachine())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := node.Annotations[AttachDetachAnnotation]; ok {
		t.Errorf("annotation %s set although enableControllerAttachDetach is false", AttachDetachAnnotation)
	}
}

func TestNodeErrors(t *testing.T) {
	tests := []struct {
		name    string
		kc      *kubeletconfigv1beta1.KubeletConfiguration
		id      Identity
		m       Machine
		wantErr string
	}{
		{"no config", nil, Identity{Name: "n"}, testMachine(), "no kubelet configuration"},
		{"no name", &kubeletconfigv1beta1.KubeletConfiguration{}, Identity{}, testMachine(), "identity name: required"},
		{"bad name", &kubeletconfigv1beta1.KubeletConfiguration{}, Identity{Name: "Node_A"}, testMachine(), "identity name \"Node_A\""},
		{"bad label", &kubeletconfigv1beta1.KubeletConfiguration{}, Identity{Name: "n", Labels: map[string]string{"a b": "c"}}, testMachine(), "identity labels"},
		{"bad ip", &kubeletconfigv1beta1.KubeletConfiguration{}, Identity{Name: "n", IPs: []string{"10.0.0.300"}}, testMachine(), "identity ips[0]"},
		{"negative maxPods", &kubeletconfigv1beta1.KubeletConfiguration{MaxPods: -1}, Identity{Name: "n"}, testMachine(), "maxPods -1"},
		{"negative podsPerCore", &kubeletconfigv1beta1.KubeletConfiguration{PodsPerCore: -1}, Identity{Name: "n"}, testMachine(), "podsPerCore -1"},
		{"bad page size", &kubeletconfigv1beta1.KubeletConfiguration{}, Identity{Name: "n"}, Machine{HugePages: map[string]int64{"big": 1}}, "huge page size \"big\""},
		{"reserve unknown resource", &kubeletconfigv1beta1.KubeletConfiguration{SystemReserved: map[string]string{"hugepages-2Mi": "1Gi"}}, Identity{Name: "n"}, testMachine(), "systemReserved[hugepages-2Mi]: cannot reserve"},
		{"reserve negative", &kubeletconfigv1beta1.KubeletConfiguration{KubeReserved: map[string]string{"memory": "-1Gi"}}, Identity{Name: "n"}, testMachine(), "kubeReserved[memory] \"-1Gi\": must not be negative"},
		{"reserve not a quantity", &kubeletconfigv1beta1.KubeletConfiguration{KubeReserved: map[string]string{"cpu": "lots"}}, Identity{Name: "n"}, testMachine(), "kubeReserved[cpu] \"lots\""},
		{"unknown signal", &kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"memory.free": "1Gi"}}, Identity{Name: "n"}, testMachine(), "evictionHard[memory.free]: unsupported eviction signal"},
		{"percentage over 100", &kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"nodefs.available": "150%"}}, Identity{Name: "n"}, testMachine(), "evictionHard[nodefs.available] \"150%\""},
		{"negative percentage", &kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"nodefs.available": "-5%"}}, Identity{Name: "n"}, testMachine(), "evictionHard[nodefs.available] \"-5%\""},
		{"zero quantity", &kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "0"}}, Identity{Name: "n"}, testMachine(), "evictionHard[memory.available] \"0\": must be positive"},
		{"bad quantity", &kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "1 Gi"}}, Identity{Name: "n"}, testMachine(), "evictionHard[memory.available] \"1 Gi\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Node(tt.kc, tt.id, tt.m)
			if err == nil {
				t.Fatalf("Node succeeded, want error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestThresholdValue(t *testing.T) {
	capacity := resource.MustParse("1000")
	tests := []struct {
		val  string
		want int64
	}{
		{"10%", 100},
		{"33.3%", 333},
		{"250", 250},
		{"1Ki", 1024},
	}
	for _, tt := range tests {
		t.Run(tt.val, func(t *testing.T) {
			ths, err := parseEvictionHard(map[string]string{"memory.available": tt.val})
			if err != nil || len(ths) != 1 {
				t.Fatalf("parseEvictionHard = %v, %v", ths, err)
			}
			got := ths[0].value(capacity)
			if got.Value() != tt.want {
				t.Errorf("Value = %d, want %d", got.Value(), tt.want)
			}
		})
	}
}

func TestReservedSystemCPUsReplacesCPUReservations(t *testing.T) {
	kc := &kubeletconfigv1beta1.KubeletConfiguration{
		MaxPods:            110,
		SystemReserved:     map[string]string{"cpu": "500m", "memory": "1Gi"},
		KubeReserved:       map[string]string{"cpu": "250m"},
		ReservedSystemCPUs: "0,2-3",
	}
	system, kube, err := Reserved(kc)
	if err != nil {
		t.Fatal(err)
	}
	if got := system[corev1.ResourceCPU]; got.String() != "3" {
		t.Errorf("system cpu = %s, want 3 (the reserved CPUs' count)", got.String())
	}
	if _, ok := kube[corev1.ResourceCPU]; ok {
		t.Errorf("kube reserved keeps cpu %v, want none with reservedSystemCPUs", kube)
	}
	alloc, err := Allocatable(kc, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")})
	if err != nil {
		t.Fatal(err)
	}
	if got := alloc[corev1.ResourceCPU]; got.String() != "1" {
		t.Errorf("allocatable cpu = %s, want 1", got.String())
	}
	kc.ReservedSystemCPUs = "0-x"
	if _, _, err := Reserved(kc); err == nil || !strings.Contains(err.Error(), "reservedSystemCPUs") {
		t.Errorf("bad reservedSystemCPUs: err = %v, want one naming the field", err)
	}
}

func TestPodsCgroupLimits(t *testing.T) {
	m := testMachine()
	m.MaxPIDs = 4096
	kc := &kubeletconfigv1beta1.KubeletConfiguration{
		MaxPods:        110,
		SystemReserved: map[string]string{"cpu": "500m", "memory": "1Gi", "pid": "1000"},
		KubeReserved:   map[string]string{"memory": "512Mi", "pid": "96"},
		EvictionHard:   map[string]string{"memory.available": "100Mi"},
	}
	check := func(name string, want map[corev1.ResourceName]string) {
		t.Helper()
		got, err := PodsCgroupLimits(kc, m)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("%s: limits = %v, want %v", name, got, want)
		}
		for k, v := range want {
			if q := got[k]; q.Cmp(resource.MustParse(v)) != 0 {
				t.Errorf("%s: %s = %s, want %s", name, k, q.String(), v)
			}
		}
	}
	// Without "pods" enforced, kubepods is limited to the whole machine.
	check("not enforced", map[corev1.ResourceName]string{"cpu": "4", "memory": "8Gi", "pid": "4096", "hugepages-2Mi": "1Gi", "hugepages-1Gi": "0"})
	// Enforced: the reservations come off; the eviction threshold does not.
	kc.EnforceNodeAllocatable = []string{"pods"}
	check("enforced", map[corev1.ResourceName]string{"cpu": "3500m", "memory": "6656Mi", "pid": "3000", "hugepages-2Mi": "1Gi", "hugepages-1Gi": "0"})
}
