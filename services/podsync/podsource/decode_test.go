package podsource

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const testNode = "node-1"

const validPodYAML = `apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: server
    image: busybox:1.36
    command: ["sh", "-c", "sleep 3600"]
    ports:
    - containerPort: 8080
    livenessProbe:
      httpGet:
        port: 8080
  - name: sidecar
    image: registry.local:5000/tools
`

func TestStaticPodDefaultsAndIdentity(t *testing.T) {
	pod, err := StaticPod([]byte(validPodYAML), "/etc/kubernetes/manifests/web.yaml", "node-1", SourceFile)
	if err != nil {
		t.Fatalf("StaticPod: %v", err)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"name", pod.Name, "web-node-1"},
		{"namespace", pod.Namespace, "default"},
		{"spec.nodeName", pod.Spec.NodeName, "node-1"},
		{"config.hash", pod.Annotations[AnnotationConfigHash], string(pod.UID)},
		{"config.source", pod.Annotations[AnnotationConfigSource], SourceFile},
		{"label kept", pod.Labels["app"], "web"},
		{"phase", pod.Status.Phase, corev1.PodPending},
		{"restartPolicy", pod.Spec.RestartPolicy, corev1.RestartPolicyAlways},
		{"dnsPolicy", pod.Spec.DNSPolicy, corev1.DNSClusterFirst},
		{"terminationGracePeriodSeconds", *pod.Spec.TerminationGracePeriodSeconds, int64(30)},
		{"schedulerName", pod.Spec.SchedulerName, "default-scheduler"},
		{"enableServiceLinks", *pod.Spec.EnableServiceLinks, true},
		{"securityContext set", pod.Spec.SecurityContext != nil, true},
		{"terminationMessagePath", pod.Spec.Containers[0].TerminationMessagePath, "/dev/termination-log"},
		{"terminationMessagePolicy", pod.Spec.Containers[0].TerminationMessagePolicy, corev1.TerminationMessageReadFile},
		{"pull policy with tag", pod.Spec.Containers[0].ImagePullPolicy, corev1.PullIfNotPresent},
		{"pull policy without tag", pod.Spec.Containers[1].ImagePullPolicy, corev1.PullAlways},
		{"port protocol", pod.Spec.Containers[0].Ports[0].Protocol, corev1.ProtocolTCP},
		{"probe timeout", pod.Spec.Containers[0].LivenessProbe.TimeoutSeconds, int32(1)},
		{"probe period", pod.Spec.Containers[0].LivenessProbe.PeriodSeconds, int32(10)},
		{"probe success", pod.Spec.Containers[0].LivenessProbe.SuccessThreshold, int32(1)},
		{"probe failure", pod.Spec.Containers[0].LivenessProbe.FailureThreshold, int32(3)},
		{"probe path", pod.Spec.Containers[0].LivenessProbe.HTTPGet.Path, "/"},
		{"probe scheme", pod.Spec.Containers[0].LivenessProbe.HTTPGet.Scheme, corev1.URISchemeHTTP},
		{"uid length (fnv128 hex)", len(pod.UID), 32},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	seen, err := time.Parse(time.RFC3339Nano, pod.Annotations[AnnotationConfigSeen])
	if err != nil || time.Since(seen) > time.Minute {
		t.Errorf("config.seen = %q (%v), want a recent RFC 3339 time", pod.Annotations[AnnotationConfigSeen], err)
	}
	tolerated := false
	for _, tol := range pod.Spec.Tolerations {
		if tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == corev1.TaintEffectNoExecute {
			tolerated = true
		}
	}
	if !tolerated {
		t.Errorf("tolerations = %v, want one tolerating every NoExecute taint", pod.Spec.Tolerations)
	}
}

func TestStaticPodUID(t *testing.T) {
	const origin = "/m/web.yaml"
	base, err := StaticPod([]byte(validPodYAML), origin, testNode, SourceFile)
	if err != nil {
		t.Fatal(err)
	}
	asJSON := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","labels":{"app":"web"}},"spec":{"containers":[
	  {"name":"server","image":"busybox:1.36","command":["sh","-c","sleep 3600"],"ports":[{"containerPort":8080}],"livenessProbe":{"httpGet":{"port":8080}}},
	  {"name":"sidecar","image":"registry.local:5000/tools"}]}}`
	cases := []struct {
		name                   string
		data, origin, node, sc string
		same                   bool
	}{
		{"same manifest again", validPodYAML, origin, testNode, SourceFile, true},
		{"same pod as JSON", asJSON, origin, testNode, SourceFile, true},
		{"a default spelled out", validPodYAML + "  restartPolicy: Always\n", origin, testNode, SourceFile, true},
		{"image changed", strings.Replace(validPodYAML, "busybox:1.36", "busybox:1.37", 1), origin, testNode, SourceFile, false},
		{"other node", validPodYAML, origin, "node-2", SourceFile, false},
		{"other file", validPodYAML, "/m/web2.yaml", testNode, SourceFile, false},
		{"other source", validPodYAML, origin, testNode, SourceHTTP, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod, err := StaticPod([]byte(c.data), c.origin, c.node, c.sc)
			if err != nil {
				t.Fatal(err)
			}
			if (pod.UID == base.UID) != c.same {
				t.Errorf("UID %s vs %s: same = %v, want %v", pod.UID, base.UID, pod.UID == base.UID, c.same)
			}
		})
	}
}

func TestStaticPodErrors(t *testing.T) {
	const origin = "/m/bad.yaml"
	pod := func(spec string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n" + spec
	}
	cases := []struct {
		name, data string
		want       []string // substrings of the error, besides origin
	}{
		{"malformed YAML", "apiVersion: v1\nkind: [Pod\n", []string{"parse"}},
		{"not an object", "- a\n- b\n", []string{"not an object"}},
		{"empty", "", []string{"not an object"}},
		{"wrong kind", "apiVersion: v1\nkind: Service\nmetadata:\n  name: p\n", []string{"kind", `"Service"`}},
		{"list not allowed in a file", "apiVersion: v1\nkind: PodList\nitems: []\n", []string{"kind", `"PodList"`}},
		{"missing kind", "apiVersion: v1\nmetadata:\n  name: p\n", []string{"kind: required"}},
		{"wrong apiVersion", "apiVersion: apps/v1\nkind: Pod\n", []string{"apiVersion", `"apps/v1"`}},
		{"kind of wrong type", "apiVersion: v1\nkind: 3\n", []string{"kind"}},
		{"port of wrong type", pod("  containers:\n  - name: c\n    image: i\n    ports:\n    - containerPort: http\n"), []string{"spec.containers.ports.containerPort", "int32"}},
		{"containers not a list", pod("  containers:\n    name: c\n"), []string{"spec.containers"}},
		{"bad quantity", pod("  containers:\n  - name: c\n    image: i\n    resources:\n      limits:\n        cpu: lots\n"), []string{"spec.containers[0].resources.limits.cpu", "lots"}},
		{"no name", "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: c\n    image: i\n", []string{"metadata.name"}},
		{"bad name", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Web_1\nspec:\n  containers:\n  - name: c\n    image: i\n", []string{"metadata.name"}},
		{"no containers", pod("  containers: []\n"), []string{"spec.containers"}},
		{"container name not a label", pod("  containers:\n  - name: My.C\n    image: i\n"), []string{"spec.containers[0].name"}},
		{"container name missing", pod("  containers:\n  - image: i\n"), []string{"spec.containers[0].name"}},
		{"duplicate across init and app", pod("  initContainers:\n  - name: c\n    image: i\n  containers:\n  - name: c\n    image: i\n"), []string{`spec.initContainers[0].name: Duplicate value: "c"`}},
		{"empty image", pod("  containers:\n  - name: c\n"), []string{"spec.containers[0].image"}},
		{"init container image", pod("  initContainers:\n  - name: i\n  containers:\n  - name: c\n    image: i\n"), []string{"spec.initContainers[0].image"}},
		{"port zero", pod("  containers:\n  - name: c\n    image: i\n    ports:\n    - containerPort: 0\n"), []string{"spec.containers[0].ports[0].containerPort"}},
		{"port too big", pod("  containers:\n  - name: c\n    image: i\n    ports:\n    - containerPort: 70000\n"), []string{"spec.containers[0].ports[0].containerPort"}},
		{"host port too big", pod("  containers:\n  - name: c\n    image: i\n    ports:\n    - containerPort: 80\n      hostPort: 65536\n"), []string{"spec.containers[0].ports[0].hostPort"}},
		{"bad restartPolicy", pod("  restartPolicy: Sometimes\n  containers:\n  - name: c\n    image: i\n"), []string{"spec.restartPolicy", "Sometimes"}},
		{"secret volume", pod("  volumes:\n  - name: s\n    secret:\n      secretName: x\n  containers:\n  - name: c\n    image: i\n"), []string{"spec.volumes[0]", "API objects"}},
		{"service account", pod("  serviceAccountName: default\n  containers:\n  - name: c\n    image: i\n"), []string{"spec.serviceAccountName"}},
		{"mount of unknown volume", pod("  containers:\n  - name: c\n    image: i\n    volumeMounts:\n    - name: data\n      mountPath: /data\n"), []string{"spec.containers[0].volumeMounts[0].name"}},
		{"ephemeral containers", pod("  containers:\n  - name: c\n    image: i\n  ephemeralContainers:\n  - name: debug\n    image: i\n"), []string{"spec.ephemeralContainers: Forbidden: cannot be set on create"}},
		{"probe without action", pod("  containers:\n  - name: c\n    image: i\n    readinessProbe:\n      periodSeconds: 5\n"), []string{"spec.containers[0].readinessProbe"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := StaticPod([]byte(c.data), origin, testNode, SourceFile)
			if err == nil {
				t.Fatalf("StaticPod = %s, want an error", got.Name)
			}
			if got != nil {
				t.Errorf("StaticPod returned a pod with its error")
			}
			for _, want := range append([]string{origin}, c.want...) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestStaticPods(t *testing.T) {
	const list = `{"apiVersion":"v1","kind":"PodList","items":[
	  {"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}},
	  {"metadata":{"name":"b"},"spec":{"containers":[{"name":"c"}]}},
	  {"metadata":{"name":"a"},"spec":{"containers":[{"name":"d","image":"i"}]}},
	  {"metadata":{"name":"c","namespace":"kube-system"},"spec":{"containers":[{"name":"c","image":"i"}]}}]}`
	cases := []struct {
		name      string
		data      string
		wantPods  []string
		wantErrs  []string
		wantNoPod bool
	}{
		{"single pod", validPodYAML, []string{"default/web-node-1"}, nil, false},
		{"list with bad and duplicate items", list, []string{"default/a-node-1", "kube-system/c-node-1"}, []string{"items[1]", "spec.containers[0].image", "items[2]", "already defined by items[0]"}, false},
		{"empty list", `{"apiVersion":"v1","kind":"PodList","items":[]}`, nil, nil, false},
		{"wrong kind", `{"apiVersion":"v1","kind":"ConfigMap"}`, nil, []string{`"Pod" or "PodList"`}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pods, err := StaticPods([]byte(c.data), "http://h/pods", testNode, SourceHTTP)
			var got []string
			for _, p := range pods {
				got = append(got, p.Namespace+"/"+p.Name)
				if p.Annotations[AnnotationConfigSource] != SourceHTTP {
					t.Errorf("pod %s: config.source = %q", p.Name, p.Annotations[AnnotationConfigSource])
				}
			}
			if strings.Join(got, ",") != strings.Join(c.wantPods, ",") {
				t.Errorf("pods = %v, want %v", got, c.wantPods)
			}
			if c.wantNoPod && pods != nil {
				t.Errorf("pods = %v, want nil", pods)
			}
			if len(c.wantErrs) == 0 && err != nil {
				t.Errorf("err = %v, want nil", err)
			}
			for _, want := range c.wantErrs {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestImagePullPolicy(t *testing.T) {
	cases := []struct {
		image string
		want  corev1.PullPolicy
	}{
		{"busybox", corev1.PullAlways},
		{"busybox:latest", corev1.PullAlways},
		{"busybox:1.36", corev1.PullIfNotPresent},
		{"localhost:5000/busybox", corev1.PullAlways},
		{"localhost:5000/busybox:v1", corev1.PullIfNotPresent},
		{"busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", corev1.PullIfNotPresent},
		{"busybox:latest@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", corev1.PullAlways},
	}
	for _, c := range cases {
		t.Run(c.image, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: c.image}}}}
			applyAPIDefaults(pod)
			if got := pod.Spec.Containers[0].ImagePullPolicy; got != c.want {
				t.Errorf("imagePullPolicy = %s, want %s", got, c.want)
			}
		})
	}
}

func TestStaticPodHostNetworkAndRequests(t *testing.T) {
	data := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  hostNetwork: true\n  containers:\n  - name: c\n    image: i\n" +
		"    resources:\n      limits:\n        cpu: 500m\n        memory: 64Mi\n      requests:\n        memory: 32Mi\n" +
		"    ports:\n    - containerPort: 9000\n"
	pod, err := StaticPod([]byte(data), "/m/p.yaml", testNode, SourceFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := pod.Spec.Containers[0].Ports[0].HostPort; got != 9000 {
		t.Errorf("hostPort = %d, want 9000 (defaulted from containerPort with hostNetwork)", got)
	}
	req := pod.Spec.Containers[0].Resources.Requests
	if req.Cpu().String() != "500m" || req.Memory().String() != "32Mi" {
		t.Errorf("requests = %v, want cpu 500m (from the limit) and memory 32Mi (as given)", req)
	}
}
