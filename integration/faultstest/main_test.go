// Package faultstest is `make test-faults`: pods churned on one node while a schedule of
// faults runs (every unitlet service SIGKILLed many times, containerd restarted and
// SIGKILLed, the API server and etcd stopped, the node's root dir filled to 100 %), with
// invariants counted and printed as a table at the end. The stack is
// integration/stacks/faults.yaml.
package faultstest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/integration/harness"
)

var stack *harness.Harness

func TestMain(m *testing.M) {
	os.Exit(harness.MainStack(m, "faults.yaml", func(h *harness.Harness) { stack = h }))
}

const (
	node = "node-1"
	ns   = "faults"
	// kindLabel tells a churned pod's kind: "serve" pods run until deleted, "finish" pods
	// end by themselves (restartPolicy Never) and must reach Succeeded in the API.
	kindLabel = "faults.unitlet.dev/kind"
)

// admin is a client of the stack's API server as its admin, without client-go's default
// rate limit (5 requests a second), which would be the churn's limit instead of the node's.
func admin(t testing.TB) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", stack.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// churnPod is the i-th pod of the churn: an init container, and a main container with a
// readiness (HTTP) and a liveness (TCP) probe that always pass, reading a configMap, a
// secret and a projected volume (a service-account token and the pod's labels) and
// writing to an emptyDir. It ends within a second of SIGTERM, well inside its grace
// period. A finish pod's main container reads its volumes, sleeps and exits 0.
func churnPod(i int, finish bool) *corev1.Pod {
	kind, script := "serve", `trap 'exit 0' TERM; mkdir -p /www && cat /cm/k /sec/k /proj/labels >/www/index.html && httpd -p 8080 -h /www; while true; do sleep 1; done`
	restart := corev1.RestartPolicyAlways
	if finish {
		kind, script = "finish", `cat /cm/k /sec/k /proj/token >/dev/null && sleep 3`
		restart = corev1.RestartPolicyNever
	}
	mounts := []corev1.VolumeMount{{Name: "cm", MountPath: "/cm"}, {Name: "sec", MountPath: "/sec"}, {Name: "proj", MountPath: "/proj"}, {Name: "scratch", MountPath: "/scratch"}}
	main := corev1.Container{
		Name: "main", Image: harness.BusyboxImage, ImagePullPolicy: corev1.PullNever,
		Command: []string{"sh", "-c", script}, VolumeMounts: mounts,
	}
	if !finish {
		main.ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
			PeriodSeconds: 5, FailureThreshold: 3,
		}
		main.LivenessProbe = &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
			InitialDelaySeconds: 2, PeriodSeconds: 10, FailureThreshold: 3,
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%05d", i), Namespace: ns, Labels: map[string]string{kindLabel: kind}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 restart,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			InitContainers: []corev1.Container{{
				Name: "init", Image: harness.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				// An empty configMap is unitlet's failure (exit 3, said in the status); a
				// write the full disk refuses is the workload's, as on any node, and does
				// not fail the init container.
				Command:                  []string{"sh", "-c", `test -s /cm/k || { echo "configMap volume: /cm/k empty" >&2; exit 3; }; test -d /scratch || { echo "emptyDir volume: /scratch missing" >&2; exit 4; }; echo init >/scratch/init 2>/dev/null || true`},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				VolumeMounts:             mounts,
			}},
			Containers: []corev1.Container{main},
			Volumes: []corev1.Volume{
				{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "faults"}}}},
				{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "faults"}}},
				{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3600)}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}},
				}}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}

// prepareNamespace makes the namespace, its configMap and secret, and waits for its
// default service account (the projected token's).
func prepareNamespace(t *testing.T) {
	t.Helper()
	c := admin(t)
	ctx := context.Background()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "faults"}, Data: map[string]string{"k": "configmap"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "faults"}, Data: map[string][]byte{"k": []byte("secret")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, time.Minute, "service account "+ns+"/default", func(ctx context.Context) (bool, string) {
		_, err := c.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	stack.WaitFor(t, 3*time.Minute, node+" Ready", func(ctx context.Context) (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return nodeReady(n), "not Ready"
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
