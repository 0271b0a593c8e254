package podworker

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
)

// fakeVolumes fails Prepare while err is set, PrepareContainer while containerErr is, and
// records the calls.
type fakeVolumes struct {
	mu           sync.Mutex
	err          error
	containerErr error
	prepares     int
	perContainer []string
	released     []string
}

func (f *fakeVolumes) PrepareContainer(_ context.Context, pod *corev1.Pod, container string) ([]criconfig.Mount, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.perContainer = append(f.perContainer, container)
	if f.containerErr != nil {
		return nil, f.containerErr
	}
	return []criconfig.Mount{{ContainerPath: "/sub", HostPath: "/var/lib/unitlet/pods/" + string(pod.UID) + "/volume-subpaths/data/" + container + "/0"}}, nil
}

func (f *fakeVolumes) Prepare(_ context.Context, pod *corev1.Pod) (map[string][]criconfig.Mount, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prepares++
	if f.err != nil {
		return nil, f.err
	}
	return map[string][]criconfig.Mount{"app": {{ContainerPath: "/data", HostPath: "/var/lib/unitlet/pods/" + string(pod.UID) + "/volumes/kubernetes.io~empty-dir/data"}}}, nil
}

func (f *fakeVolumes) Release(_ context.Context, pod *corev1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, string(pod.UID))
	return nil
}

func (f *fakeVolumes) set(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func TestSyncWaitsForVolumesThenMountsThem(t *testing.T) {
	cri := newMemCRI("busybox:1")
	vols := &fakeVolumes{err: errors.New(`volume "config": configMap default/app not found`)}
	h := newHarnessWith(t, cri, vols)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	h.m.Update(pod, "api")

	o := h.ev.waitFor(t, "app waiting in ContainerCreating", func(o Observed) bool {
		w := statusOf(o, "app").State.Waiting
		return w != nil && w.Reason == "ContainerCreating"
	})
	if o.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s while volumes fail, want Pending", o.Status.Phase)
	}
	if !h.ev.hasEvent("FailedMount") {
		t.Errorf("no FailedMount event while the volumes fail")
	}
	if got := cri.callsOf("RunPodSandbox"); len(got) != 0 {
		t.Errorf("sandboxes %v made before the volumes were ready", got)
	}

	vols.set(nil)
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	cri.mu.Lock()
	var mounted bool
	for _, c := range cri.containers {
		for _, m := range c.cfg.Mounts {
			mounted = mounted || m.ContainerPath == "/data"
		}
	}
	cri.mu.Unlock()
	if !mounted {
		t.Errorf("the container was created without the volume's mount")
	}

	if !h.m.Terminate(pod.UID, nil, "", "") {
		t.Fatal("Terminate refused")
	}
	h.ev.waitFor(t, "terminated", func(o Observed) bool { return o.Terminated })
	deadline := time.Now().Add(5 * time.Second)
	for {
		vols.mu.Lock()
		n := len(vols.released)
		vols.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("volumes released %d times after termination, want once", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSubPathIsResolvedAgainAtEveryStart(t *testing.T) {
	cri := newMemCRI("busybox:1")
	vols := &fakeVolumes{}
	h := newHarnessWith(t, cri, vols)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app", "plain")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/sub", SubPath: "sub"}}
	vols.mu.Lock()
	vols.containerErr = errors.New(`volume "data": failed to prepare subPath for volumeMount "data" of container "app": subPath "sub" refused: symlink "sub" points to the absolute path "/", outside the volume`)
	vols.mu.Unlock()
	h.m.Update(pod, "api")

	h.ev.waitFor(t, "app waiting in CreateContainerConfigError", func(o Observed) bool {
		w := statusOf(o, "app").State.Waiting
		return w != nil && w.Reason == "CreateContainerConfigError" && strings.Contains(w.Message, `subPath "sub" refused`)
	})
	if !h.ev.hasEvent("Failed") {
		t.Errorf("no Failed event naming the refused subPath")
	}
	for _, c := range cri.callsOf("CreateContainer") {
		if strings.HasPrefix(c, "app ") {
			t.Fatalf("app created (%s) while its subPath is refused", c)
		}
	}

	vols.mu.Lock()
	vols.containerErr = nil
	vols.mu.Unlock()
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") && isRunning(o, "plain") })
	cri.mu.Lock()
	var mounted bool
	for _, c := range cri.containers {
		for _, m := range c.cfg.Mounts {
			mounted = mounted || (m.ContainerPath == "/sub" && strings.HasSuffix(m.HostPath, "/volume-subpaths/data/app/0"))
		}
	}
	cri.mu.Unlock()
	if !mounted {
		t.Errorf("app was created without its subPath's bind mount")
	}
	vols.mu.Lock()
	per := append([]string(nil), vols.perContainer...)
	vols.mu.Unlock()
	for _, c := range per {
		if c != "app" {
			t.Errorf("PrepareContainer called for %s, which has no subPath", c)
		}
	}

	// A restart resolves the subPath again.
	n := len(per)
	cri.exit(t, "app", 1)
	h.m.Trigger(pod.UID)
	deadline := time.Now().Add(20 * time.Second)
	for {
		vols.mu.Lock()
		m := len(vols.perContainer)
		vols.mu.Unlock()
		if m > n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("app restarted without its subPath resolved again (%d calls before and after)", n)
		}
		h.m.Trigger(pod.UID)
		time.Sleep(50 * time.Millisecond)
	}
}

// A container with a subPath starts from its own mounts: the pod's volumes refused for
// another container's subPath (a symlink swapped in after that container's refusal) do
// not hold it back, as the kubelet resolves each container's subPaths at its own start.
func TestSubPathContainerStartsWhileAnotherIsRefused(t *testing.T) {
	cri := newMemCRI("busybox:1")
	vols := &fakeVolumes{}
	h := newHarnessWith(t, cri, vols)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app", "plain")
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/sub", SubPath: "sub"}}
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "both running", func(o Observed) bool { return isRunning(o, "app") && isRunning(o, "plain") })

	vols.set(errors.New(`volume "data": failed to prepare subPath for volumeMount "data" of container "victim": subPath "sub" refused`))
	updated := pod.DeepCopy()
	updated.Labels = map[string]string{"changed": "yes"} // a new pod object: the pod's mounts are asked again
	h.m.Update(updated, "api")
	cri.exit(t, "app", 1)
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "app restarted", func(o Observed) bool { return isRunning(o, "app") && statusOf(o, "app").RestartCount == 1 })
}

// A new version of the pod whose volumes fail once (unitlet-volumes restarting, a full
// disk) after its init container has run: the init container keeps its terminated state,
// and the pod completes once the volumes are back.
func TestAVolumeFailureAfterInitDoesNotHoldThePodInitializing(t *testing.T) {
	cri := newMemCRI("busybox:1")
	vols := &fakeVolumes{}
	h := newHarnessWith(t, cri, vols)
	pod := syncPod(corev1.RestartPolicyNever, []string{"init"}, "app")
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "init running", func(o Observed) bool { return isRunning(o, "init") })

	// The init container ends; the pod changes in the API (a label) and its volumes fail.
	vols.set(errors.New("write the configMap: no space left on device"))
	pod = pod.DeepCopy()
	pod.Labels = map[string]string{"changed": "yes"}
	cri.exit(t, "init", 0)
	h.m.Update(pod, "api")
	for deadline := time.Now().Add(10 * time.Second); !h.ev.hasEvent("FailedMount"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no FailedMount event for the new version's volumes")
		}
	}
	h.ev.mu.Lock()
	ran := len(h.ev.reports)
	h.ev.mu.Unlock()

	vols.set(nil)
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	cri.exit(t, "app", 0)
	h.m.Trigger(pod.UID)
	o := h.ev.waitFor(t, "Succeeded", func(o Observed) bool { return o.Status.Phase == corev1.PodSucceeded })
	if init := statusOf(o, "init"); init.State.Terminated == nil || init.State.Terminated.ExitCode != 0 {
		t.Errorf("init status %+v, want terminated with 0", init.State)
	}
	h.ev.mu.Lock()
	defer h.ev.mu.Unlock()
	for _, o := range h.ev.reports[ran:] {
		if w := statusOf(o, "init").State.Waiting; w != nil {
			t.Errorf("init reported waiting %+v after it ran (%s)", w, describe(o.Status))
		}
	}
}
