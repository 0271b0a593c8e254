package podsource

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// staticPodSpec is a manifest of a pod named p with the given spec lines (indented by two).
func staticPodSpec(spec string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n" + spec
}

// Manifests the API server's validation refuses that a partial check let through: the
// kubelet runs ValidatePodCreate on every file and URL pod, so these must not run.
var invalidStaticPods = []struct {
	name, manifest string
	want           string // the field at fault, as the error names it
}{
	{"bidirectional propagation unprivileged", staticPodSpec(`  volumes:
  - name: host
    hostPath: {path: /mnt}
  containers:
  - name: c
    image: i
    volumeMounts:
    - {name: host, mountPath: /mnt, mountPropagation: Bidirectional}
`), "spec.containers[0].volumeMounts.mountPropagation: Forbidden"},
	{"unmasked proc with host users", staticPodSpec(`  containers:
  - name: c
    image: i
    securityContext: {procMount: Unmasked}
`), "spec.containers[0].securityContext.procMount"},
	{"seccomp localhost profile escaping its root", staticPodSpec(`  securityContext:
    seccompProfile: {type: Localhost, localhostProfile: ../../etc/evil.json}
  containers:
  - name: c
    image: i
`), "spec.securityContext.seccompProfile.localhostProfile"},
	{"container seccomp localhost profile escaping its root", staticPodSpec(`  containers:
  - name: c
    image: i
    securityContext:
      seccompProfile: {type: Localhost, localhostProfile: ../evil.json}
`), "spec.containers[0].securityContext.seccompProfile.localhostProfile"},
	{"apparmor localhost profile without a name", staticPodSpec(`  securityContext:
    appArmorProfile: {type: Localhost}
  containers:
  - name: c
    image: i
`), "spec.securityContext.appArmorProfile.localhostProfile"},
	{"subPath escaping the volume", staticPodSpec(`  volumes:
  - name: data
  containers:
  - name: c
    image: i
    volumeMounts:
    - {name: data, mountPath: /data, subPath: ../../etc}
`), "spec.containers[0].volumeMounts.subPath"},
	{"hostPath with ..", staticPodSpec(`  volumes:
  - name: host
    hostPath: {path: /var/../etc}
  containers:
  - name: c
    image: i
`), "spec.volumes[0].hostPath.path"},
	{"sysctl with a bad name", staticPodSpec(`  securityContext:
    sysctls: [{name: "kernel/../x", value: "1"}]
  containers:
  - name: c
    image: i
`), "spec.securityContext.sysctls[0].name"},
	{"negative runAsUser", staticPodSpec(`  securityContext: {runAsUser: -1}
  containers:
  - name: c
    image: i
`), "spec.securityContext.runAsUser"},
	{"bad label value", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {app: \"not a valid value\"}\nspec:\n  containers:\n  - name: c\n    image: i\n", "metadata.labels"},
	{"dnsPolicy None without dnsConfig", staticPodSpec(`  dnsPolicy: None
  containers:
  - name: c
    image: i
`), "spec.dnsConfig"},
	{"bad hostAliases ip", staticPodSpec(`  hostAliases: [{ip: "not-an-ip", hostnames: [a]}]
  containers:
  - name: c
    image: i
`), "spec.hostAliases[0].ip"},
	{"requests above limits", staticPodSpec(`  containers:
  - name: c
    image: i
    resources:
      limits: {memory: 10Mi}
      requests: {memory: 20Mi}
`), "spec.containers[0].resources.requests"},
	{"env var with a bad field path", staticPodSpec(`  containers:
  - name: c
    image: i
    env: [{name: X, valueFrom: {fieldRef: {fieldPath: spec.nothing}}}]
`), "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath"},
	{"same mount path twice", staticPodSpec(`  volumes: [{name: a}, {name: b}]
  containers:
  - name: c
    image: i
    volumeMounts: [{name: a, mountPath: /x}, {name: b, mountPath: /x}]
`), "spec.containers[0].volumeMounts[1].mountPath"},
	{"hostNetwork with a different hostPort", staticPodSpec(`  hostNetwork: true
  containers:
  - name: c
    image: i
    ports: [{containerPort: 80, hostPort: 81}]
`), "spec.containers[0].ports[0].hostPort"},
	{"projected service account token", staticPodSpec(`  volumes:
  - name: tok
    projected:
      sources: [{serviceAccountToken: {path: token}}]
  containers:
  - name: c
    image: i
`), "spec.volumes[0].projected.sources[0]"},
}

func TestStaticPodFullValidation(t *testing.T) {
	const origin = "/etc/kubernetes/manifests/p.yaml"
	for _, c := range invalidStaticPods {
		t.Run(c.name, func(t *testing.T) {
			pod, err := StaticPod([]byte(c.manifest), origin, testNode, SourceFile)
			if err == nil {
				t.Fatalf("StaticPod accepted %s, want it refused naming %s", pod.Name, c.want)
			}
			for _, want := range []string{origin, c.want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
}

// What the API accepts must still run: the checks must not refuse more than the kubelet.
func TestStaticPodValidationAccepts(t *testing.T) {
	cases := map[string]string{
		"bidirectional propagation privileged": staticPodSpec(`  volumes:
  - name: host
    hostPath: {path: /mnt}
  containers:
  - name: c
    image: i
    securityContext: {privileged: true}
    volumeMounts:
    - {name: host, mountPath: /mnt, mountPropagation: Bidirectional}
`),
		"unmasked proc in a user namespace": staticPodSpec(`  hostUsers: false
  containers:
  - name: c
    image: i
    securityContext: {procMount: Unmasked}
`),
		"seccomp localhost profile below its root": staticPodSpec(`  securityContext:
    seccompProfile: {type: Localhost, localhostProfile: profiles/audit.json}
  containers:
  - name: c
    image: i
`),
		"capabilities added": staticPodSpec(`  containers:
  - name: c
    image: i
    securityContext:
      capabilities: {add: [NET_ADMIN, SYS_TIME]}
`),
		"control plane shape": staticPodSpec(`  hostNetwork: true
  priorityClassName: system-node-critical
  priority: 2000001000
  securityContext:
    seccompProfile: {type: RuntimeDefault}
  volumes:
  - name: certs
    hostPath: {path: /etc/kubernetes/pki, type: DirectoryOrCreate}
  - name: info
    downwardAPI:
      items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]
  containers:
  - name: c
    image: registry.k8s.io/kube-apiserver:v1.36.3
    command: [kube-apiserver]
    resources: {requests: {cpu: 250m}}
    ports: [{containerPort: 6443}]
    env: [{name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
    livenessProbe:
      httpGet: {host: 127.0.0.1, path: /livez, port: 6443, scheme: HTTPS}
      failureThreshold: 8
    volumeMounts: [{name: certs, mountPath: /etc/kubernetes/pki, readOnly: true}, {name: info, mountPath: /info}]
`),
	}
	for name, manifest := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := StaticPod([]byte(manifest), "/m/p.yaml", testNode, SourceFile); err != nil {
				t.Fatalf("StaticPod: %v", err)
			}
		})
	}
}

// An invalid file is reported naming the file and the field; the other files' pods run.
func TestWatchDirRefusesInvalidPod(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "good.yaml"), podManifest("good", "i"))
	bad := filepath.Join(dir, "bidirectional.yaml")
	writeFile(t, bad, invalidStaticPods[0].manifest)
	sink, rep := startWatchDir(t, dir, time.Hour)
	sink.waitFor(t, watchLatency, "only the good pod", namesAre("default/good-node-1"))
	rep.waitFor(t, watchLatency, SourceFile+" "+bad+": static pod "+bad+": "+invalidStaticPods[0].want)
}

// A bad item of a URL's list is reported naming the URL, the item and the field; the
// other items run.
func TestStaticPodsRefusesInvalidItem(t *testing.T) {
	const url = "http://manifests.example/pods"
	list := `{"apiVersion":"v1","kind":"PodList","items":[
	  {"metadata":{"name":"good"},"spec":{"containers":[{"name":"c","image":"i"}]}},
	  {"metadata":{"name":"bad"},"spec":{"containers":[{"name":"c","image":"i","securityContext":{"procMount":"Unmasked"}}]}}]}`
	pods, err := StaticPods([]byte(list), url, testNode, SourceHTTP)
	if got := podNames(pods); strings.Join(got, ",") != "default/good-node-1" {
		t.Errorf("pods = %v, want only the good one", got)
	}
	want := "static pod " + url + ": items[1]: spec.containers[0].securityContext.procMount"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want it to contain %q", err, want)
	}
}
