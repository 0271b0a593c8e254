package harnesstest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/integration/harness"
)

// TestCRISandboxAndContainerRun runs a pod sandbox and a busybox container through CRI on
// the stack's containerd, reads its output at the CRI log path, and cleans up. The
// containerd and its shim are the ones the stack's runtime.version names.
func TestCRISandboxAndContainerRun(t *testing.T) {
	t.Parallel()
	rt, err := stack.CRI()
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Debian 12's package reports 1.6.20~ds1; the module's build its tag.
	wantVersion, wantShim := "1.6.", "/usr/bin/containerd-shim-runc-v2"
	if stack.Stack().Runtime.Version == harness.Containerd2 {
		wantVersion, wantShim = harness.ContainerdVersion, filepath.Join(harness.Containerd2Dir(), "containerd-shim-runc-v2")
	}
	v, err := rt.Runtime.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil || v.GetRuntimeName() != "containerd" || !strings.HasPrefix(v.GetRuntimeVersion(), wantVersion) {
		t.Fatalf("CRI Version: %v %v, want containerd %s", v, err, wantVersion)
	}

	for _, img := range []string{harness.PauseImage, harness.BusyboxImage, harness.TestServerImage} {
		st, err := rt.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: img}})
		if err != nil || st.GetImage() == nil {
			t.Fatalf("image %s is not in the runtime: %v", img, err)
		}
	}

	uid := fmt.Sprintf("harness-%d", time.Now().UnixNano())
	logDir := filepath.Join(t.TempDir(), "pods", "default_cri-test_"+uid)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	podConfig := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "cri-test", Namespace: "default", Uid: uid},
		Hostname:     "cri-test",
		LogDirectory: logDir,
		// Not the kubelet's pod labels: node-1's unitlet-podsync shares this containerd and
		// stops pods with those labels that nobody asked it to run.
		Labels: map[string]string{"unitlet.test/pod": uid},
		Linux:  &runtimeapi.LinuxPodSandboxConfig{},
	}
	pod, err := rt.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v\n%s", err, stack.Logs(30, "containerd"))
	}
	removed := false
	defer func() {
		if !removed {
			rt.Runtime.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.PodSandboxId})
			rt.Runtime.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.PodSandboxId})
		}
	}()
	ps, err := rt.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod.PodSandboxId})
	if err != nil || ps.GetStatus().GetNetwork().GetIp() == "" {
		t.Fatalf("the sandbox has no IP from the bridge network: %v %v", err, ps.GetStatus().GetNetwork())
	}

	c, err := rt.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod.PodSandboxId,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "hello"},
			Image:    &runtimeapi.ImageSpec{Image: harness.BusyboxImage},
			Command:  []string{"sh", "-c", "echo hello from $(hostname); echo ok > /tmp/x && cat /tmp/x"},
			LogPath:  "hello/0.log",
		},
		SandboxConfig: podConfig,
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if _, err := rt.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	shims := stack.ShimExecutables()
	if len(shims) == 0 {
		t.Fatal("no shim of the stack's containerd runs while it runs a sandbox")
	}
	for _, s := range shims {
		if s != wantShim {
			t.Errorf("a shim of the stack's containerd runs %s, want %s", s, wantShim)
		}
	}
	stack.WaitFor(t, time.Minute, "the container exits 0", func(ctx context.Context) (bool, string) {
		st, err := rt.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ContainerId})
		if err != nil {
			return false, err.Error()
		}
		s := st.GetStatus()
		return s.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED && s.GetExitCode() == 0, fmt.Sprintf("%s exit %d %s", s.GetState(), s.GetExitCode(), s.GetMessage())
	})
	log, err := os.ReadFile(filepath.Join(logDir, "hello", "0.log"))
	if err != nil {
		t.Fatal(err)
	}
	// CRI log lines: <time> <stream> <tag> <text>.
	if !strings.Contains(string(log), " stdout F hello from cri-test") || !strings.Contains(string(log), " stdout F ok") {
		t.Fatalf("CRI log:\n%s", log)
	}

	if _, err := rt.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
	removed = true
	cs, err := rt.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: pod.PodSandboxId}})
	if err != nil || len(cs.GetContainers()) != 0 {
		t.Fatalf("containers left after removing the sandbox: %v %v", cs.GetContainers(), err)
	}
}
