package podworker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/pullcreds"
	"github.com/unitlet/unitlet/services/podsync/relist"
)

// runSandbox makes the pod's sandbox: its log directory, then RunPodSandbox.
func (w *worker) runSandbox(ctx context.Context, pod *corev1.Pod, attempt uint32) (*relist.Sandbox, error) {
	o, err := w.podOptions(pod)
	if err != nil {
		w.sandboxFailed(pod, err)
		return nil, fmt.Errorf("sandbox config: %w", err)
	}
	cfg, err := criconfig.SandboxConfig(pod, attempt, o)
	if err != nil {
		w.sandboxFailed(pod, err)
		return nil, fmt.Errorf("sandbox config: %w", err)
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return nil, fmt.Errorf("pod log directory: %w", err)
	}
	// As the kubelet, the RuntimeClass is looked up only now: a missing one fails the
	// sandbox (and is retried), it does not reject the pod.
	handler, err := w.runtimeHandler(pod)
	if err != nil {
		w.sandboxFailed(pod, err)
		return nil, fmt.Errorf("runtime handler: %w", err)
	}
	w.acted.Store(true)
	resp, err := w.m.o.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		w.sandboxFailed(pod, err)
		return nil, fmt.Errorf("run pod sandbox: %w", err)
	}
	sb := &relist.Sandbox{ID: resp.PodSandboxId, Attempt: attempt, Ready: true, CreatedAt: w.m.o.Clock.Now()}
	st, err := w.m.o.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: resp.PodSandboxId})
	if err != nil {
		return nil, fmt.Errorf("status of the new pod sandbox %s: %w", resp.PodSandboxId, err)
	}
	sb.IPs = relist.SandboxIPs(st.GetStatus())
	return sb, nil
}

// sandboxFailed records the kubelet's event for a sandbox that could not be made.
func (w *worker) sandboxFailed(pod *corev1.Pod, err error) {
	w.event(pod, corev1.EventTypeWarning, "FailedCreatePodSandBox", fmt.Sprintf("Failed to create pod sandbox: %v", err))
}

// podIPs are the pod's IPs: its sandbox's, or the node's for host-network pods.
func (w *worker) podIPs(pod *corev1.Pod, sb *relist.Sandbox) []string {
	if pod.Spec.HostNetwork && w.m.o.HostIPs != nil {
		return w.m.o.HostIPs()
	}
	if sb == nil {
		return nil
	}
	return sb.IPs
}

// startContainer pulls the image if it must, creates and starts one instance of c, and
// runs its postStart hook.
func (w *worker) startContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, sb *relist.Sandbox, sbCfg *runtimeapi.PodSandboxConfig, rp *relist.Pod, init bool) error {
	if err := w.ensureImage(ctx, pod, c, sbCfg); err != nil {
		return err
	}
	restartCount := 0
	if prev := rp.Latest(c.Name); prev != nil {
		restartCount = int(prev.Attempt) + 1
	}
	if n, _ := w.restartedAll(c.Name, false); int(n) > restartCount {
		// Its instances were removed by a restart of all the pod's containers.
		restartCount = int(n)
	}
	ips := w.podIPs(pod, sb)
	pe := criconfig.PodEnv{PodIPs: ips, PodsDir: w.m.o.CRI.PodsDir}
	if len(ips) > 0 {
		pe.PodIP = ips[0]
	}
	if w.m.o.HostIPs != nil {
		pe.HostIPs = w.m.o.HostIPs()
		if len(pe.HostIPs) > 0 {
			pe.HostIP = pe.HostIPs[0]
		}
	}
	if w.m.o.Allocatable != nil {
		pe.Allocatable = w.m.o.Allocatable()
	}
	var cm []criconfig.Mount
	if hasSubPath(c) && w.m.o.Volumes != nil {
		// As the kubelet, resolve subPaths at every start: the volume's content may have
		// changed since the pod's volumes were prepared. The container's own mounts only:
		// another container's refused subPath is that container's error, not this one's.
		// A subPathExpr is expanded from the container's environment first, and
		// unitlet-volumes gets it as the subPath it expands to.
		prepared, err := w.expandSubPathExprs(ctx, pod, c, pe)
		if err == nil {
			cm, err = w.m.o.Volumes.PrepareContainer(ctx, prepared, c.Name)
		}
		if err != nil {
			w.setWaiting(c.Name, "CreateContainerConfigError", err.Error())
			w.event(pod, corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
			return fmt.Errorf("container %s: %w", c.Name, err)
		}
	} else {
		mounts, err := w.volumeMounts(ctx, pod, rp, sb)
		if err != nil {
			return err
		}
		cm = mounts[c.Name]
	}
	images, err := w.imageVolumeMounts(ctx, pod, c, sbCfg)
	if err != nil {
		return err
	}
	cm = append(cm, images...)
	cfg, termPath, err := w.containerConfig(ctx, pod, c, rp, restartCount, ips, cm, pe)
	if err == nil {
		err = w.verifyRunAsNonRoot(ctx, pod, c)
	}
	if err != nil {
		w.setWaiting(c.Name, "CreateContainerConfigError", err.Error())
		w.event(pod, corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
		return err
	}
	if termPath != "" {
		if err := os.MkdirAll(filepath.Dir(termPath), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(termPath, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return fmt.Errorf("termination message file: %w", err)
		}
		f.Close()
		_ = os.Chmod(termPath, 0o666)
	}
	w.acted.Store(true)
	created, err := w.m.o.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.ID, Config: cfg, SandboxConfig: sbCfg})
	if err != nil {
		w.setWaiting(c.Name, "CreateContainerError", err.Error())
		w.event(pod, corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
		return fmt.Errorf("create container %s: %w", c.Name, err)
	}
	w.event(pod, corev1.EventTypeNormal, "Created", "Created container: "+c.Name)
	w.actuated(pod, c.Name, c.Resources)
	if err := w.m.journal.begin(created.ContainerId); err != nil {
		return fmt.Errorf("record the start of container %s: %w", c.Name, err)
	}
	// It cannot finish before its start was asked.
	w.sawRunning(c.Name, created.ContainerId, w.m.o.Clock.Now())
	_, err = w.m.o.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId})
	if !startOutcomeUnknown(err) {
		w.m.journal.end(created.ContainerId)
	}
	if err != nil {
		w.setWaiting(c.Name, "RunContainerError", err.Error())
		w.event(pod, corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
		return fmt.Errorf("start container %s: %w", c.Name, err)
	}
	w.setWaiting(c.Name, "", "")
	w.event(pod, corev1.EventTypeNormal, "Started", "Started container "+c.Name)
	started := w.m.o.Clock.Now()
	if probed(c, init) && w.m.o.Probes != nil && ephemeralSpec(pod, c.Name) == nil {
		w.m.o.Probes.SetContainer(pod, first(ips), c, created.ContainerId, started)
	}
	if h := postStart(c); h != nil && w.m.o.Hooks != nil {
		if err := w.m.o.Hooks(ctx, pod, c, created.ContainerId, first(ips), h); err != nil {
			msg := fmt.Sprintf("PostStartHook failed: %v", err)
			w.event(pod, corev1.EventTypeWarning, "FailedPostStartHook", msg)
			cur := &relist.Container{ID: created.ContainerId, Name: c.Name, State: runtimeapi.ContainerState_CONTAINER_RUNNING}
			if kerr := w.killContainer(ctx, pod, c, cur, sb, kill{message: "FailedPostStartHook"}); kerr != nil {
				return errors.Join(err, kerr)
			}
			return fmt.Errorf("postStart hook of %s: %w", c.Name, err)
		}
	}
	return nil
}

// startOutcomeUnknown reports whether a StartContainer call failed without an answer: the
// runtime went away during the call (containerd killed or restarted), or the call ran out of
// time or was cancelled. The start stays in the journal, as one a killed podsync left: an
// instance that never ran (containerd 1.6 leaves it unknown, then exited with no start
// time once it is stopped) is then removed and started afresh, not taken for a failure of
// the container's, which under restartPolicy Never would fail the pod.
func startOutcomeUnknown(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

func postStart(c *corev1.Container) *corev1.LifecycleHandler {
	if c.Lifecycle == nil {
		return nil
	}
	return c.Lifecycle.PostStart
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// pullPolicy is the container's imagePullPolicy, defaulted as the API server does.
func pullPolicy(c *corev1.Container) corev1.PullPolicy {
	if c.ImagePullPolicy != "" {
		return c.ImagePullPolicy
	}
	ref := c.Image
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		return corev1.PullIfNotPresent
	}
	tag := ""
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		tag = ref[i+1:]
	}
	if tag == "" || tag == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// ensureImage makes the container's image present as its pull policy asks, with the
// kubelet's events and waiting reasons (ErrImagePull, ImagePullBackOff, ErrImageNeverPull).
// An image already on the node is used only when the pull records allow it to this pod
// (ensureSecretPulledImages); otherwise the pod pulls it with its own credentials, and
// with pull policy Never it fails as if the image were absent, which reveals nothing.
func (w *worker) ensureImage(ctx context.Context, pod *corev1.Pod, c *corev1.Container, sbCfg *runtimeapi.PodSandboxConfig) error {
	spec := &runtimeapi.ImageSpec{Image: c.Image}
	st, err := w.m.o.Runtime.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec})
	if err != nil {
		w.setWaiting(c.Name, "ErrImageInspect", err.Error())
		return fmt.Errorf("inspect image %s: %w", c.Image, err)
	}
	// The pod's credentials are looked up once, and only when needed.
	creds := sync.OnceValues(func() ([]pullcreds.Auth, error) { return w.pullCredentials(ctx, pod, c.Image) })
	failed := func(err error) error {
		msg := fmt.Sprintf("Failed to pull image %q: %v", c.Image, err)
		w.setWaiting(c.Name, "ErrImagePull", msg)
		w.event(pod, corev1.EventTypeWarning, "Failed", msg)
		return errors.New(msg)
	}
	present, policy, records := st.GetImage() != nil, pullPolicy(c), w.m.o.PullRecords
	if present && policy != corev1.PullAlways {
		if records == nil {
			w.event(pod, corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine", c.Image))
			return nil
		}
		must, err := records.MustPull(c.Image, st.GetImage().GetId(), func() ([]kubeletv1beta1.ImagePullSecret, error) {
			return secretsOf(creds())
		})
		if err != nil {
			return failed(err)
		}
		if !must {
			w.event(pod, corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", c.Image))
			return nil
		}
		present = false
	}
	if !present && policy == corev1.PullNever {
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image)
		w.setWaiting(c.Name, "ErrImageNeverPull", msg)
		w.event(pod, corev1.EventTypeWarning, "ErrImageNeverPull", msg)
		return errors.New(msg)
	}
	key := string(pod.UID) + "_" + c.Image
	if w.m.pulls.IsInBackOffSince(key, w.m.o.Clock.Now()) {
		msg := fmt.Sprintf("Back-off pulling image %q", c.Image)
		w.setWaiting(c.Name, "ImagePullBackOff", msg)
		w.event(pod, corev1.EventTypeNormal, "BackOff", msg)
		return errors.New(msg)
	}
	auths, err := creds()
	if err != nil {
		return failed(err)
	}
	if records != nil {
		if err := records.Intend(c.Image); err != nil {
			return failed(fmt.Errorf("record the intent to pull: %w", err))
		}
	}
	w.event(pod, corev1.EventTypeNormal, "Pulling", fmt.Sprintf("Pulling image %q", c.Image))
	start := w.m.o.Clock.Now()
	var ref string
	var used *pullcreds.Auth
	err = w.m.pullLimits.do(ctx, func() (err error) { ref, used, err = w.pull(ctx, spec, sbCfg, auths); return err })
	if err != nil {
		if records != nil {
			records.Failed(c.Image)
		}
		w.m.pulls.Next(key, w.m.o.Clock.Now())
		return failed(err)
	}
	if records != nil {
		records.Pulled(c.Image, ref, pulledWith(used))
	}
	w.m.pulls.DeleteEntry(key)
	w.event(pod, corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Successfully pulled image %q in %s", c.Image, w.m.o.Clock.Since(start).Round(time.Millisecond)))
	return nil
}

// verifyRunAsNonRoot checks runAsNonRoot against the user the image runs as, read from the
// runtime as the kubelet's getImageUser does: a numeric uid, else a user name, else root.
func (w *worker) verifyRunAsNonRoot(ctx context.Context, pod *corev1.Pod, c *corev1.Container) error {
	st, err := w.m.o.Runtime.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: c.Image}})
	if err != nil {
		return err
	}
	uid, user := new(int64), ""
	if img := st.GetImage(); img.GetUid() != nil {
		uid = &img.GetUid().Value
	} else if img.GetUsername() != "" {
		uid, user = nil, img.GetUsername()
	}
	return criconfig.VerifyRunAsNonRoot(pod, c, uid, user)
}

// hasSubPath reports whether one of c's volumeMounts has a subPath.
// imageVolumeMounts pulls the image volumes c mounts (each with its pullPolicy and the
// pod's pull secrets, as the container's image) and returns their mounts: the runtime
// mounts each image read-only, at its subPath when the volumeMount has one.
func (w *worker) imageVolumeMounts(ctx context.Context, pod *corev1.Pod, c *corev1.Container, sbCfg *runtimeapi.PodSandboxConfig) ([]criconfig.Mount, error) {
	var out []criconfig.Mount
	for _, vm := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name && v.Image != nil })
		if i < 0 {
			continue
		}
		src := pod.Spec.Volumes[i].Image
		// Pulled as the container's own image is, its waiting reasons and events the
		// container's.
		puller := &corev1.Container{Name: c.Name, Image: src.Reference, ImagePullPolicy: src.PullPolicy}
		if err := w.ensureImage(ctx, pod, puller, sbCfg); err != nil {
			return nil, fmt.Errorf("image volume %s: %w", vm.Name, err)
		}
		out = append(out, criconfig.Mount{ContainerPath: vm.MountPath, Image: src.Reference, SubPath: vm.SubPath, ReadOnly: true})
	}
	return out, nil
}

// expandSubPathExprs is pod with c's subPathExprs expanded (pod itself when c has none).
func (w *worker) expandSubPathExprs(ctx context.Context, pod *corev1.Pod, c *corev1.Container, pe criconfig.PodEnv) (*corev1.Pod, error) {
	if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.SubPathExpr != "" }) {
		return pod, nil
	}
	var err error
	if pe.Services, err = w.services(); err != nil {
		return nil, err
	}
	expanded, err := criconfig.ExpandSubPathExprs(ctx, pod, c, pe, w.m.o.Objects)
	if err != nil {
		return nil, err
	}
	return criconfig.WithContainer(pod, expanded), nil
}

func hasSubPath(c *corev1.Container) bool {
	for _, vm := range c.VolumeMounts {
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			return true
		}
	}
	return false
}
