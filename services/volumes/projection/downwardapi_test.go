package projection

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestFormatMap(t *testing.T) {
	got := FormatMap(map[string]string{"b": "2", "a": `say "hi"` + "\n\tbye", "c.io/x": "ünï"})
	want := "a=\"say \\\"hi\\\"\\n\\tbye\"\nb=\"2\"\nc.io/x=\"ünï\""
	if got != want {
		t.Errorf("FormatMap = %q, want %q", got, want)
	}
	if FormatMap(nil) != "" {
		t.Error("empty map is not empty")
	}
}

func TestDownwardAPIFields(t *testing.T) {
	pod := testPod()
	field := func(p, f string) corev1.DownwardAPIVolumeFile {
		return corev1.DownwardAPIVolumeFile{Path: p, FieldRef: &corev1.ObjectFieldSelector{FieldPath: f}}
	}
	source := &corev1.DownwardAPIVolumeSource{
		DefaultMode: ptr(int32(0o444)),
		Items: []corev1.DownwardAPIVolumeFile{
			field("name", "metadata.name"),
			field("namespace", "metadata.namespace"),
			field("uid", "metadata.uid"),
			field("labels", "metadata.labels"),
			field("annotations", "metadata.annotations"),
			field("meta/app", "metadata.labels['app']"),
			field("meta/missing", "metadata.labels['nope']"),
			field("meta/x", "metadata.annotations['a.io/x']"),
		},
	}
	source.Items[0].Mode = ptr(int32(0o400))
	got, err := DownwardAPIPayload(source, pod, nil, DefaultMode)
	if err != nil {
		t.Fatal(err)
	}
	expectFiles(t, got, map[string]string{
		"name":         "web",
		"namespace":    "default",
		"uid":          "1234-5678",
		"labels":       "app=\"web\"\ntier=\"front\"",
		"annotations":  "a.io/x=\"1\"\nnote=\"say \\\"hi\\\"\\nbye\"",
		"meta/app":     "web",
		"meta/missing": "",
		"meta/x":       "1",
	})
	expectMode(t, got, "name", 0o400)
	expectMode(t, got, "uid", 0o444)

	got, err = DownwardAPIPayload(&corev1.DownwardAPIVolumeSource{Items: source.Items[1:2]}, pod, nil, DefaultMode)
	if err != nil {
		t.Fatal(err)
	}
	expectMode(t, got, "namespace", 0o644)
}

func TestDownwardAPIRefusals(t *testing.T) {
	for _, f := range []string{"spec.nodeName", "status.podIP", "metadata.name['x']", "metadata.labels['bad key!']"} {
		_, err := DownwardAPIPayload(&corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "f", FieldRef: &corev1.ObjectFieldSelector{FieldPath: f}},
		}}, testPod(), nil, DefaultMode)
		if err == nil || !strings.Contains(err.Error(), `downwardAPI file "f"`) {
			t.Errorf("fieldPath %s gave %v, want an error naming the file", f, err)
		}
	}
}

func TestDownwardAPIResources(t *testing.T) {
	pod := testPod()
	pod.Spec.Containers[0].Resources.Limits[corev1.ResourceName("hugepages-2Mi")] = resource.MustParse("4Mi")
	allocatable := newAPI().sources().Allocatable
	res := func(p, container, r, divisor string) corev1.DownwardAPIVolumeFile {
		ref := &corev1.ResourceFieldSelector{ContainerName: container, Resource: r}
		if divisor != "" {
			ref.Divisor = resource.MustParse(divisor)
		}
		return corev1.DownwardAPIVolumeFile{Path: p, ResourceFieldRef: ref}
	}
	source := &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
		res("cpu_limit", "main", "limits.cpu", ""),             // 1.5 cores rounded up
		res("cpu_limit_m", "main", "limits.cpu", "1m"),         // millicores
		res("cpu_request_m", "main", "requests.cpu", "1m"),     // 250
		res("cpu_request", "main", "requests.cpu", ""),         // 0.25 rounded up
		res("mem_limit", "main", "limits.memory", ""),          // bytes
		res("mem_limit_mi", "main", "limits.memory", "1Mi"),    // 64
		res("mem_request_ki", "main", "requests.memory", "1k"), // 33554432/1000 rounded up
		res("eph_limit_gi", "main", "limits.ephemeral-storage", "1Gi"),
		res("init_cpu", "init", "limits.cpu", ""),
		res("init_mem_mi", "init", "limits.memory", "1Mi"),
		res("init_eph_request", "init", "requests.ephemeral-storage", ""),
		res("huge", "main", "limits.hugepages-2Mi", "1Mi"),
	}}
	got, err := DownwardAPIPayload(source, pod, allocatable, DefaultMode)
	if err != nil {
		t.Fatal(err)
	}
	expectFiles(t, got, map[string]string{
		"cpu_limit":        "2",
		"cpu_limit_m":      "1500",
		"cpu_request_m":    "250",
		"cpu_request":      "1",
		"mem_limit":        "67108864",
		"mem_limit_mi":     "64",
		"mem_request_ki":   "33555",
		"eph_limit_gi":     "100", // not set: the node's allocatable
		"init_cpu":         "4",
		"init_mem_mi":      "8192",
		"init_eph_request": "0",
		"huge":             "4",
	})

	for _, bad := range []corev1.DownwardAPIVolumeFile{
		res("x", "", "limits.cpu", ""),
		res("x", "sidecar", "limits.cpu", ""),
		res("x", "main", "limits.gpu", ""),
		res("x", "main", "cpu", ""),
	} {
		_, err := DownwardAPIPayload(&corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{bad}}, pod, allocatable, DefaultMode)
		if err == nil {
			t.Errorf("resourceFieldRef %+v accepted", *bad.ResourceFieldRef)
		}
	}
}
