package harnesstest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/integration/csidriver"
)

// inPod runs a command in a pod's container through kubectl exec (the API server, the node
// API and the runtime's streaming server).
func inPod(t *testing.T, pod string, cmd ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return kubectl(ctx, t, append([]string{"exec", pod, "--"}, cmd...)...)
}

func mustInPod(t *testing.T, pod string, cmd ...string) string {
	t.Helper()
	out, err := inPod(t, pod, cmd...)
	if err != nil {
		t.Fatalf("in %s: %v: %v\n%s", pod, cmd, err, out)
	}
	return out
}

func createObject[T any](t *testing.T, create func(context.Context, T, metav1.CreateOptions) (T, error), obj T, del func(context.Context, string, metav1.DeleteOptions) error, name string) {
	t.Helper()
	if _, err := create(context.Background(), obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create %s: %v", name, err)
	}
	t.Cleanup(func() { _ = del(context.Background(), name, metav1.DeleteOptions{}) })
}

// podEvents are the reasons and messages of a pod's events.
func podEvents(ctx context.Context, t *testing.T, name string) string {
	evs, err := admin(t).CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range evs.Items {
		fmt.Fprintf(&b, "%s: %s\n", e.Reason, e.Message)
	}
	return b.String()
}

func TestVolumesEveryPluginFromInsideTheContainer(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	cms, secrets := c.CoreV1().ConfigMaps("default"), c.CoreV1().Secrets("default")
	createObject(t, cms.Create, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vol-cm"}, Data: map[string]string{"a": "A", "b": "B"}}, cms.Delete, "vol-cm")
	createObject(t, secrets.Create, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "vol-secret"}, Data: map[string][]byte{"password": []byte("s3cret")}}, secrets.Delete, "vol-secret")
	hostDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(hostDir, "from-host"), []byte("H"), 0o644); err != nil {
		t.Fatal(err)
	}

	p := busyboxPod("vol-all", "while true; do sleep 1; done")
	p.Labels = map[string]string{"app": "vol"}
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	p.Spec.Volumes = []corev1.Volume{
		{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "vol-cm"},
			Items:                []corev1.KeyToPath{{Key: "a", Path: "dir/a.txt", Mode: ptr.To[int32](0o600)}},
		}}},
		{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "vol-secret"}}},
		{Name: "down", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
			{Path: "cpu", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "main", Resource: "limits.cpu", Divisor: resource.MustParse("1m")}},
		}}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi"))}}},
		{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir, Type: &dirOrCreate}}},
		{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "unitlet-test", ExpirationSeconds: ptr.To[int64](600), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "vol-cm"}, Items: []corev1.KeyToPath{{Key: "b", Path: "b"}}}},
		}}}},
	}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "cm", MountPath: "/cm"}, {Name: "secret", MountPath: "/secret"}, {Name: "down", MountPath: "/down"},
		{Name: "scratch", MountPath: "/scratch"}, {Name: "mem", MountPath: "/mem"}, {Name: "host", MountPath: "/host"},
		{Name: "proj", MountPath: "/proj"},
	}
	createPod(t, p)
	apiPodRunningReady(t, "vol-all", time.Minute)

	for _, tc := range []struct{ cmd, want string }{
		{"cat /cm/dir/a.txt", "A"},
		{"stat -L -c %a /cm/dir/a.txt", "600"},
		{"cat /secret/password", "s3cret"},
		{"stat -L -c %a /secret/password", "644"},
		{"cat /down/labels", `app="vol"`},
		{"cat /down/name", "vol-all"},
		{"cat /down/cpu", "500"},
		{"cat /host/from-host", "H"},
		{"cat /proj/b", "B"},
		{"stat -c %a /scratch", "777"},
		{"sh -c 'echo x >/scratch/f && cat /scratch/f'", "x"},
		{"sh -c 'grep \" /mem \" /proc/mounts | cut -d\" \" -f3'", "tmpfs"},
	} {
		out, err := inPod(t, "vol-all", "sh", "-c", tc.cmd)
		if err != nil || strings.TrimSpace(out) != tc.want {
			t.Errorf("%s: %q (%v), want %q", tc.cmd, strings.TrimSpace(out), err, tc.want)
		}
	}
	// configMap, secret, downwardAPI and projected volumes are read-only in the container.
	if out, err := inPod(t, "vol-all", "sh", "-c", "echo y >/cm/new"); err == nil {
		t.Errorf("writing into the configMap volume worked: %s", out)
	}
	// The memory emptyDir holds its sizeLimit (1Mi): 2 MiB do not fit.
	if out, err := inPod(t, "vol-all", "sh", "-c", "dd if=/dev/zero of=/mem/big bs=1024 count=2048"); err == nil || !strings.Contains(out, "No space left") {
		t.Errorf("writing 2 MiB into a 1Mi memory emptyDir: %v\n%s", err, out)
	}
	// What the container writes into the hostPath is on the host.
	mustInPod(t, "vol-all", "sh", "-c", "echo C >/host/from-container")
	if b, err := os.ReadFile(filepath.Join(hostDir, "from-container")); err != nil || strings.TrimSpace(string(b)) != "C" {
		t.Errorf("hostPath: the host sees %q (%v)", b, err)
	}
	// The projected token is the pod's service account's, bound to the pod, for the audience.
	tok := mustInPod(t, "vol-all", "cat", "/proj/token")
	review, err := c.AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok, Audiences: []string{"unitlet-test"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !review.Status.Authenticated || review.Status.User.Username != "system:serviceaccount:default:default" || review.Status.User.Extra["authentication.kubernetes.io/pod-name"][0] != "vol-all" {
		t.Errorf("TokenReview of the projected token: %+v", review.Status)
	}

	// Deleted: the volumes go (the tmpfs unmounted, the pod's volume directory removed).
	uid := mustGetUID(t, "vol-all")
	if err := c.CoreV1().Pods("default").Delete(context.Background(), "vol-all", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, time.Minute, "the pod's volumes released", func(ctx context.Context) (bool, string) {
		mounts, _ := os.ReadFile("/proc/self/mountinfo")
		if strings.Contains(string(mounts), uid) {
			return false, "a mount of the pod is still there"
		}
		return true, ""
	})
}

func mustGetUID(t *testing.T, name string) string {
	t.Helper()
	p, err := admin(t).CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(p.UID)
}

func TestVolumesConfigMapUpdateReachesThePod(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	cms := c.CoreV1().ConfigMaps("default")
	createObject(t, cms.Create, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vol-live"}, Data: map[string]string{"v": "one"}}, cms.Delete, "vol-live")
	p := busyboxPod("vol-live", "while true; do sleep 1; done")
	p.Spec.Volumes = []corev1.Volume{{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "vol-live"}}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cm", MountPath: "/cm"}}
	createPod(t, p)
	apiPodRunningReady(t, "vol-live", time.Minute)
	if out := strings.TrimSpace(mustInPod(t, "vol-live", "cat", "/cm/v")); out != "one" {
		t.Fatalf("/cm/v = %q, want one", out)
	}
	cm, err := cms.Get(context.Background(), "vol-live", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["v"] = "two"
	if _, err := cms.Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Within the sync period (the node's syncFrequency, 1 minute) and a little.
	stack.WaitFor(t, 90*time.Second, "the update in the running container", func(ctx context.Context) (bool, string) {
		out, err := inPod(t, "vol-live", "cat", "/cm/v")
		return err == nil && strings.TrimSpace(out) == "two", out
	})
	t.Logf("the configMap update reached the container after %s", time.Since(start).Round(time.Second))
}

func TestVolumesMissingSecretKeepsThePodWaiting(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	p := busyboxPod("vol-wait", "while true; do sleep 1; done")
	p.Spec.Volumes = []corev1.Volume{{Name: "late", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "vol-late"}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "late", MountPath: "/late"}}
	createPod(t, p)
	stack.WaitFor(t, time.Minute, "a FailedMount event naming the secret", func(ctx context.Context) (bool, string) {
		evs := podEvents(ctx, t, "vol-wait")
		return strings.Contains(evs, "FailedMount") && strings.Contains(evs, "vol-late"), evs
	})
	got, err := c.CoreV1().Pods("default").Get(context.Background(), "vol-wait", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s while the secret is missing, want Pending", got.Status.Phase)
	}
	secrets := c.CoreV1().Secrets("default")
	createObject(t, secrets.Create, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "vol-late"}, Data: map[string][]byte{"k": []byte("here")}}, secrets.Delete, "vol-late")
	apiPodRunningReady(t, "vol-wait", time.Minute)
	if out := strings.TrimSpace(mustInPod(t, "vol-wait", "cat", "/late/k")); out != "here" {
		t.Errorf("/late/k = %q, want here", out)
	}
}

func TestVolumesSubPathEscapeIsRefused(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	hostDir := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(hostDir, "escape")); err != nil {
		t.Fatal(err)
	}
	p := busyboxPod("vol-escape", "while true; do sleep 1; done")
	p.Spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "host", MountPath: "/x", SubPath: "escape"}}
	created := createPod(t, p)
	stack.WaitFor(t, time.Minute, "a FailedMount event naming the subPath", func(ctx context.Context) (bool, string) {
		evs := podEvents(ctx, t, "vol-escape")
		return strings.Contains(evs, "FailedMount") && strings.Contains(evs, `subPath "escape"`), evs
	})
	if ctrs := runtimeContainers(context.Background(), t, string(created.UID)); len(ctrs) != 0 {
		t.Errorf("containers %v created for a pod whose subPath escapes its volume", ctrs)
	}
}

// TestVolumesSubPathExpr: a volumeMount's subPathExpr is expanded from the container's
// environment (the pod's name from the downward API) at its start, as the kubelet does:
// the container's /logs is <volume>/<pod name>; a reference to a variable the container
// does not have keeps the container waiting in CreateContainerConfigError naming it.
func TestVolumesSubPathExpr(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	pod := func(name, expr string) *corev1.Pod {
		p := busyboxPod(name, "echo from-expr >/logs/f; while true; do sleep 1; done")
		p.Spec.Volumes = []corev1.Volume{{Name: "logs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "logs", MountPath: "/logs", SubPathExpr: expr}, {Name: "logs", MountPath: "/all"}}
		return p
	}
	createPod(t, pod("vol-expr", "$(POD_NAME)/logs"))
	createPod(t, pod("vol-expr-missing", "$(NOT_SET)"))
	apiPodRunningReady(t, "vol-expr", time.Minute)
	if out := strings.TrimSpace(mustInPod(t, "vol-expr", "cat", "/all/vol-expr/logs/f")); out != "from-expr" {
		t.Errorf("/all/vol-expr/logs/f = %q, want the file written to /logs (subPathExpr $(POD_NAME)/logs)", out)
	}
	apiPodUntil(t, "vol-expr-missing", "waiting in CreateContainerConfigError naming the variable", time.Minute, func(p *corev1.Pod) bool {
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerConfigError" && strings.Contains(w.Message, "missing value for NOT_SET") {
				return true
			}
		}
		return false
	})
}

// TestVolumesKubectlRunWithTheDefaultToken is kubectl run as users type it: the pod gets
// the kube-api-access projected volume (token, ca.crt, namespace) and starts.
func TestVolumesKubectlRunWithTheDefaultToken(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := kubectl(ctx, t, "run", "plain", "--image=unitlet.local/busybox:1", "--image-pull-policy=Never", "--", "sleep", "3600"); err != nil {
		t.Fatalf("kubectl run: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = admin(t).CoreV1().Pods("default").Delete(context.Background(), "plain", deleteNow()) })
	apiPodRunningReady(t, "plain", time.Minute)
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount"
	if out := strings.TrimSpace(mustInPod(t, "plain", "cat", sa+"/namespace")); out != "default" {
		t.Errorf("%s/namespace = %q", sa, out)
	}
	if out := mustInPod(t, "plain", "cat", sa+"/ca.crt"); !strings.Contains(out, "BEGIN CERTIFICATE") {
		t.Errorf("%s/ca.crt = %.80q", sa, out)
	}
	tok := strings.TrimSpace(mustInPod(t, "plain", "cat", sa+"/token"))
	review, err := admin(t).AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok}}, metav1.CreateOptions{})
	if err != nil || !review.Status.Authenticated {
		t.Errorf("TokenReview of the default token: %+v %v", review.Status, err)
	}
}

// mountsOf counts the host's mounts under the pods' volume directories, by pod UID.
func mountsOf(uids map[string]bool) map[string]int {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.Contains(f[4], "/volumes/kubernetes.io~") {
			continue
		}
		for uid := range uids {
			if strings.Contains(f[4], "/pods/"+uid+"/") {
				out[uid]++
			}
		}
	}
	return out
}

// TestVolumesSIGKILLDuringChurnLosesNothing: 30 pods with a secret, an emptyDir and a
// claim on a local PV each, the first 20 also a claim on a CSI PV of the harness's staging
// test driver (an ext4 image on a loop device each), the driver run as its own process;
// unitlet-volumes and the driver SIGKILLed while unitlet-volumes prepares them, and both
// again with all running: every pod runs, each local volume mounted once, each CSI volume
// staged once and published once, nothing lost; all unmounted (and unstaged, no loop
// device left) once the pods go, the local volumes' files kept.
func TestVolumesSIGKILLDuringChurnLosesNothing(t *testing.T) {
	// Serial: SIGKILLs unitlet-volumes.
	const n, withCSI = 30, 20
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	root := stack.NodeRootDir(podsyncNode)
	const driver = "chn.csi.unitlet.test"
	csiState := t.TempDir()
	drv, err := csidriver.StartProcess(csidriver.Options{
		Name: driver, RegistrationDir: filepath.Join(root, "plugins_registry"), Endpoint: filepath.Join(root, "plugins", driver, "csi.sock"),
		NodeID: "unitlet-" + podsyncNode, StateDir: csiState, Stage: true, CallLog: filepath.Join(csiState, "calls.jsonl"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Stop)
	createObject(t, c.StorageV1().CSIDrivers().Create, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}}, c.StorageV1().CSIDrivers().Delete, driver)
	stagingOf := func(i int) string {
		return filepath.Join(root, "plugins", "kubernetes.io", "csi", driver, fmt.Sprintf("%x", sha256.Sum256([]byte(fmt.Sprintf("churn-%02d", i)))), "globalmount")
	}
	secrets := c.CoreV1().Secrets("default")
	createObject(t, secrets.Create, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "churn"}, Data: map[string][]byte{"k": []byte("v")}}, secrets.Delete, "churn")
	var names []string
	// Each pod also has a claim on a local PV of its own (bind-mounted by unitlet-volumes).
	disks := t.TempDir()
	pvs, pvcs := c.CoreV1().PersistentVolumes(), c.CoreV1().PersistentVolumeClaims("default")
	onNode := &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{podsyncNode}}}}}}}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("churn-%02d", i)
		disk := filepath.Join(disks, name)
		if err := os.Mkdir(disk, 0o755); err != nil {
			t.Fatal(err)
		}
		size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
		rwo := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
		createObject(t, pvs.Create, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + name}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: disk}}, NodeAffinity: onNode,
			AccessModes: rwo, Capacity: size, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		}}, pvs.Delete, "pv-"+name)
		createObject(t, pvcs.Create, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(""), VolumeName: "pv-" + name, AccessModes: rwo, Resources: corev1.VolumeResourceRequirements{Requests: size},
		}}, pvcs.Delete, name)
		p := busyboxPod(name, "while true; do sleep 1; done")
		p.Spec.Volumes = []corev1.Volume{
			{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "churn"}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "disk", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}},
		}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "sec", MountPath: "/sec"}, {Name: "scratch", MountPath: "/scratch"}, {Name: "disk", MountPath: "/disk"}}
		if i < withCSI {
			createObject(t, pvs.Create, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-csi-" + name}, Spec: corev1.PersistentVolumeSpec{
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: name, FSType: "ext4"}},
				AccessModes:            rwo, Capacity: size, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			}}, pvs.Delete, "pv-csi-"+name)
			createObject(t, pvcs.Create, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "csi-" + name}, Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: ptr.To(""), VolumeName: "pv-csi-" + name, AccessModes: rwo, Resources: corev1.VolumeResourceRequirements{Requests: size},
			}}, pvcs.Delete, "csi-"+name)
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "csi", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "csi-" + name}}})
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "csi", MountPath: "/csi"})
		}
		if _, err := c.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
	}
	t.Cleanup(func() {
		for _, name := range names {
			_ = c.CoreV1().Pods("default").Delete(context.Background(), name, deleteNow())
		}
	})
	time.Sleep(1500 * time.Millisecond) // in the middle of preparing them
	sigkill(t, "volumes")
	if err := drv.Kill(); err != nil {
		t.Fatal(err)
	}
	restartServices(t)

	uids := map[string]bool{}
	stack.WaitFor(t, 4*time.Minute, "all 30 pods Running and Ready in the API", func(ctx context.Context) (bool, string) {
		ready := 0
		for _, name := range names {
			p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err == nil && p.Status.Phase == corev1.PodRunning && conditionIs(p.Status, corev1.PodReady, corev1.ConditionTrue) {
				ready++
				uids[string(p.UID)] = true
			}
		}
		return ready == n, fmt.Sprintf("%d of %d ready", ready, n)
	})
	check := func(when string) {
		t.Helper()
		failed := false
		if m := mountsOf(uids); len(m) != n {
			failed = true
			var missing []string
			for _, name := range names {
				if p, err := c.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{}); err == nil && m[string(p.UID)] == 0 {
					missing = append(missing, fmt.Sprintf("%s (uid %s; events: %s)", name, p.UID, podEvents(context.Background(), t, name)))
				}
			}
			t.Errorf("%s: %d of %d pods have their secret's tmpfs mounted; without: %s", when, len(m), n, strings.Join(missing, "; "))
		}
		for _, name := range []string{names[0], names[n/2], names[n-1]} {
			if out, err := inPod(t, name, "cat", "/sec/k"); err != nil || strings.TrimSpace(out) != "v" {
				failed = true
				t.Errorf("%s: %s reads %q (%v) from its secret volume", when, name, out, err)
			}
		}
		// Each local volume bind-mounted once, for its own pod: never twice after a restart.
		table := mountTable(t)
		for _, name := range names {
			p, err := c.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			at := filepath.Join(stack.NodeRootDir(podsyncNode), "pods", string(p.UID), "volumes", "kubernetes.io~local-volume", "pv-"+name)
			if k := strings.Count(table, " "+at+" "); k != 1 {
				failed = true
				t.Errorf("%s: %s's local volume is mounted %d times at %s, want once", when, name, k, at)
			}
			if i := slices.Index(names, name); i < withCSI {
				// Staged once for the node, published once for the pod.
				target := filepath.Join(root, "pods", string(p.UID), "volumes", "kubernetes.io~csi", "pv-csi-"+name, "mount")
				if k, ks := strings.Count(table, " "+target+" "), strings.Count(table, " "+stagingOf(i)+" "); k != 1 || ks != 1 {
					failed = true
					t.Errorf("%s: %s's CSI volume is published %d times and staged %d times, want once each", when, name, k, ks)
				}
			}
		}
		if failed {
			t.Logf("the services' logs:\n%s", stack.Logs(80))
		}
	}
	check("after a SIGKILL while preparing")
	// Killed again with everything running: on its restart it unmounts and deletes nothing.
	mustInPod(t, names[0], "sh", "-c", "echo kept >/scratch/f && echo kept >/disk/f && echo kept >/csi/f")
	sigkill(t, "volumes")
	if err := drv.Kill(); err != nil {
		t.Fatal(err)
	}
	restartServices(t)
	time.Sleep(5 * time.Second) // its reconcile at start
	check("after a SIGKILL with every pod running")
	if out := strings.TrimSpace(mustInPod(t, names[0], "cat", "/scratch/f")); out != "kept" {
		t.Errorf("the emptyDir lost its file across the restart: %q", out)
	}
	if out := strings.TrimSpace(mustInPod(t, names[0], "cat", "/disk/f")); out != "kept" {
		t.Errorf("the local volume lost its file across the restart: %q", out)
	}
	if out := strings.TrimSpace(mustInPod(t, names[0], "cat", "/csi/f")); out != "kept" {
		t.Errorf("the CSI volume lost its file across the restarts: %q", out)
	}
	// Deleted: every pod's volumes are released.
	for _, name := range names {
		_ = c.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	stack.WaitFor(t, 2*time.Minute, "every pod's tmpfs, local and CSI volume unmounted, the CSI volumes unstaged", func(ctx context.Context) (bool, string) {
		m := mountsOf(uids)
		staged := strings.Count(mountTable(t), "/"+driver+"/")
		return len(m) == 0 && staged == 0, fmt.Sprintf("%d pods still have mounts, %d staging mounts left", len(m), staged)
	})
	for i := 0; i < withCSI; i++ {
		img := filepath.Join(csiState, fmt.Sprintf("churn-%02d.img", i))
		if out, err := exec.Command("losetup", "-j", img).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("loop devices left on %s: %s %v", img, out, err)
		}
	}
	calls, err := drv.Calls()
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]string{}
	for _, call := range calls {
		last[call.VolumeID] = call.Method
	}
	for i := 0; i < withCSI; i++ {
		if h := fmt.Sprintf("churn-%02d", i); last[h] != "NodeUnstageVolume" {
			t.Errorf("the driver's last call for %s: %q, want NodeUnstageVolume", h, last[h])
		}
	}
	if b, err := os.ReadFile(filepath.Join(disks, names[0], "f")); err != nil || strings.TrimSpace(string(b)) != "kept" {
		t.Errorf("%s's local volume after the pod went: %q %v, want its file kept", names[0], b, err)
	}
}
