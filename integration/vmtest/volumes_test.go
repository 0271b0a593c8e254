package vmtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unitlet/unitlet/integration/harness"
)

// TestFSGroupVolumesUnderTheShippedUnit runs a pod with fsGroup and a volume of each kind
// (a claim on a local PV among them, with fsGroupChangePolicy OnRootMismatch) on the vm
// node, where unitlet-volumes runs under its shipped unit (systemd's sandbox
// enforced). The unit once had RestrictSUIDSGID=yes, which made the set-group-ID volume
// directories fail with EPERM: such a pod stayed in ContainerCreating. Each volume's files
// must belong to the fsGroup, emptyDirs must be set-group-ID so a file the container makes
// takes the group (as the kubelet does), and the memory emptyDir must be a nosuid,nodev
// tmpfs. The HugePages emptyDir is a hugetlbfs of the guest's 2 MiB pages, and a variable
// from an environment file an init container wrote (fileKeyRef) reaches the container.
func TestFSGroupVolumesUnderTheShippedUnit(t *testing.T) {
	n := vmNode(t)
	c := admin(t)
	ctx := context.Background()
	ns := "default"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vm-fsgroup-cm", Namespace: ns}, Data: map[string]string{"a": "from the configMap"}}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "vm-fsgroup-secret", Namespace: ns}, StringData: map[string]string{"s": "from the secret"}}
	for _, create := range []func() error{
		func() error { _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); return err },
		func() error { _, err := c.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); return err },
	} {
		if err := create(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		_ = c.CoreV1().ConfigMaps(ns).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
		_ = c.CoreV1().Secrets(ns).Delete(context.Background(), sec.Name, metav1.DeleteOptions{})
	}()

	// A claim on a local PV: a directory in the guest whose root already has the fsGroup
	// (group-writable, set-group-ID), holding a file of root's group. With
	// fsGroupChangePolicy OnRootMismatch that file keeps its group; the directory is
	// bind-mounted by unitlet-volumes under its unit.
	const disk = "/var/lib/unitlet-test/vm-fsgroup-disk"
	stack.InNode(t, n.Name, "sh", "-c", "rm -rf "+disk+" && mkdir -p "+disk+" && echo old > "+disk+"/old && chgrp 2000 "+disk+" && chmod 2775 "+disk)
	defer func() { _ = stack.Exec(n.Name, []string{"rm", "-rf", disk}).Run() }()
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	rwo := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "vm-fsgroup-pv"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: disk}},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{n.Name}}}}}}},
		AccessModes: rwo, Capacity: size, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
	}}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "vm-fsgroup-pvc", Namespace: ns}, Spec: corev1.PersistentVolumeClaimSpec{
		StorageClassName: new(string), VolumeName: pv.Name, AccessModes: rwo, Resources: corev1.VolumeResourceRequirements{Requests: size},
	}}
	if _, err := c.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	}()
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), pvc.Name, metav1.DeleteOptions{})
	}()

	fsGroup, user, grace := int64(2000), int64(1000), int64(1)
	onRootMismatch := corev1.FSGroupChangeOnRootMismatch
	mode := int32(0o440)
	script := strings.Join([]string{
		"stat -L -c 'STAT %n %g %a' /cm/a /sec/s /dapi/labels /proj/a /sub /scratch /mem /disk /disk/old /huge",
		"echo x > /scratch/made && stat -L -c 'STAT %n %g %a' /scratch/made",
		"echo x > /disk/made && stat -L -c 'STAT %n %g %a' /disk/made",
		"grep ' /mem ' /proc/self/mounts | sed 's/^/MOUNT /'",
		"grep ' /huge ' /proc/self/mounts | sed 's/^/HUGE /'",
		"touch /huge/made && echo HUGEWRITABLE",
		`echo "FROMFILE ${FROM_FILE-unset}"`,
		"sed 's/^/SUB /' /sub; echo",
		"echo DONE",
		"exec sleep 100000",
	}, "; ")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-fsgroup", Namespace: ns, Labels: map[string]string{"app": "fsgroup"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  new(bool),
			SecurityContext:               &corev1.PodSecurityContext{FSGroup: &fsGroup, RunAsUser: &user, FSGroupChangePolicy: &onRootMismatch},
			// fileKeyRef: an environment file the init container writes into the emptyDir,
			// read by unitlet-podsync under its unit's sandbox and system call filter.
			InitContainers: []corev1.Container{{
				Name: "write-env", Image: harness.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", `printf "GREETING='from the env file'\n" > /scratch/vars.env`},
				VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}},
			}},
			Containers: []corev1.Container{{
				Name: "c", Image: harness.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script},
				Env: []corev1.EnvVar{{Name: "FROM_FILE", ValueFrom: &corev1.EnvVarSource{
					FileKeyRef: &corev1.FileKeySelector{VolumeName: "scratch", Path: "vars.env", Key: "GREETING"}}}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "cm", MountPath: "/cm", ReadOnly: true},
					{Name: "sec", MountPath: "/sec"},
					{Name: "dapi", MountPath: "/dapi"},
					{Name: "proj", MountPath: "/proj"},
					{Name: "cm", MountPath: "/sub", SubPath: "a"},
					{Name: "scratch", MountPath: "/scratch"},
					{Name: "mem", MountPath: "/mem"},
					{Name: "disk", MountPath: "/disk"},
					{Name: "huge", MountPath: "/huge"},
				},
				// Huge pages from the guest's pool (the kernel's hugepages=8 of 2 MiB).
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi"), "hugepages-2Mi": resource.MustParse("4Mi")},
					Limits:   corev1.ResourceList{"hugepages-2Mi": resource.MustParse("4Mi")},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}, DefaultMode: &mode}}},
				{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: sec.Name}}},
				{Name: "dapi", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				}}}},
				{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}},
				}}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
				{Name: "disk", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}},
				{Name: "huge", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumHugePages}}},
			},
		},
	}
	created, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) }()

	stack.WaitFor(t, 3*time.Minute, "pod vm-fsgroup Running", func(ctx context.Context) (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		events, _ := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
		var msgs []string
		for _, e := range events.Items {
			msgs = append(msgs, e.Reason+": "+e.Message)
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("%s on %q; events %q", p.Status.Phase, p.Spec.NodeName, msgs)
	})

	// The container's output, from its log file in the guest (the API server cannot reach
	// a vm node's kubelet port for kubectl logs).
	logFile := fmt.Sprintf("/var/log/pods/%s_%s_%s/c/0.log", ns, pod.Name, created.UID)
	var out string
	stack.WaitFor(t, time.Minute, "the container's report", func(context.Context) (bool, string) {
		o, err := stack.Exec(n.Name, []string{"cat", logFile}).CombinedOutput()
		out = string(o)
		return err == nil && strings.Contains(out, "DONE"), out
	})
	if !strings.Contains(out, "SUB from the configMap") {
		t.Errorf("/sub (subPath a of the configMap) does not show the key's content:\n%s", out)
	}
	// The subPath reaches the runtime as a bind mount that unitlet-volumes made, under its
	// unit, through the descriptor of its safe resolution.
	if o, err := stack.Exec(n.Name, []string{"grep", "-c", "/pods/" + string(created.UID) + "/volume-subpaths/cm/c/4", "/proc/self/mountinfo"}).CombinedOutput(); err != nil || strings.TrimSpace(string(o)) == "0" {
		t.Errorf("no subPath bind mount in the guest for the pod: %v %s", err, o)
	}
	stats := map[string][2]string{} // path: group, mode
	var mounts []string
	for _, line := range strings.Split(out, "\n") {
		if _, rest, ok := strings.Cut(line, " STAT "); ok {
			f := strings.Fields(rest)
			if len(f) == 3 {
				stats[f[0]] = [2]string{f[1], f[2]}
			}
		}
		if _, rest, ok := strings.Cut(line, " MOUNT "); ok {
			mounts = append(mounts, rest)
		}
	}
	for _, p := range []string{"/cm/a", "/sec/s", "/dapi/labels", "/proj/a", "/scratch", "/mem", "/scratch/made", "/disk", "/disk/made", "/huge"} {
		st, ok := stats[p]
		if !ok {
			t.Errorf("%s: not in the container's report:\n%s", p, out)
			continue
		}
		if st[0] != "2000" {
			t.Errorf("%s: group %s, want the fsGroup 2000 (mode %s)", p, st[0], st[1])
		}
	}
	if st := stats["/cm/a"]; st[1] != "440" {
		t.Errorf("/cm/a: mode %s, want the defaultMode 440", st[1])
	}
	for _, p := range []string{"/scratch", "/mem"} {
		if st := stats[p]; !strings.HasPrefix(st[1], "2") {
			t.Errorf("%s: mode %s, want set-group-ID (2xxx) so new files take the fsGroup", p, st[1])
		}
	}
	// OnRootMismatch: the local volume's root had the group, so nothing below it changed.
	if st, ok := stats["/disk/old"]; !ok || st[0] != "0" {
		t.Errorf("/disk/old: group %q, want root's 0 kept (fsGroupChangePolicy OnRootMismatch, the root already matching)", st[0])
	}
	// The local volume is unitlet-volumes' bind mount at the kubelet's path for it.
	if o, err := stack.Exec(n.Name, []string{"grep", "-c", "/pods/" + string(created.UID) + "/volumes/kubernetes.io~local-volume/" + pv.Name, "/proc/self/mountinfo"}).CombinedOutput(); err != nil || strings.TrimSpace(string(o)) == "0" {
		t.Errorf("no bind mount of the local volume in the guest for the pod: %v %s", err, o)
	}
	if _, ok := stats["/sub"]; !ok {
		t.Errorf("/sub (a configMap key by subPath): not in the container's report:\n%s", out)
	}
	// The memory emptyDir's tmpfs as the container sees it (a bind of unitlet's mount). A
	// read-only volume (secrets, configMaps) is remounted read-only by runc 1.1, which
	// drops the two flags in the container's view; unitlet's own mount keeps them (the
	// emptydir package's tests).
	if len(mounts) != 1 {
		t.Errorf("want the /mem tmpfs mount in the container, got %q", mounts)
	}
	for _, m := range mounts {
		if !strings.Contains(m, "nosuid") || !strings.Contains(m, "nodev") {
			t.Errorf("mount %q: want nosuid,nodev", m)
		}
	}
	// The HugePages emptyDir: a hugetlbfs of the pod's 2 MiB pages that unitlet-volumes
	// mounted under its unit, writable by the pod's non-root user through the fsGroup.
	if !strings.Contains(out, "FROMFILE from the env file") {
		t.Errorf("want FROM_FILE from the init container's env file (fileKeyRef) in the container:\n%s", out)
	}
	if !strings.Contains(out, "hugetlbfs") || !strings.Contains(out, "pagesize=2M") || !strings.Contains(out, "HUGEWRITABLE") {
		t.Errorf("want /huge a writable hugetlbfs of 2M pages in the container:\n%s", out)
	}
	node, err := c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := node.Status.Capacity["hugepages-2Mi"]; q.String() != "16Mi" {
		t.Errorf("node capacity hugepages-2Mi %s, want the guest's 16Mi", q.String())
	}
}
