package podsync

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/services/podsync/containerlogs"
	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/imagegc"
)

// ListContainers lists every container (filters are not applied).
func (f *fakeCRI) ListContainers(context.Context, *runtimeapi.ListContainersRequest, ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &runtimeapi.ListContainersResponse{}
	for id, c := range f.containers {
		out.Containers = append(out.Containers, &runtimeapi.Container{
			Id: id, PodSandboxId: c.sandboxID, Metadata: c.cfg.Metadata, State: c.state, CreatedAt: c.created,
			Image: c.cfg.Image, ImageRef: c.cfg.GetImage().GetImage(), Labels: c.cfg.Labels, Annotations: c.cfg.Annotations,
		})
	}
	return out, nil
}

// ListPodSandbox lists every sandbox (filters are not applied).
func (f *fakeCRI) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest, ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &runtimeapi.ListPodSandboxResponse{}
	for id, cfg := range f.sandboxes {
		st := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		if f.sbReady[id] {
			st = runtimeapi.PodSandboxState_SANDBOX_READY
		}
		out.Items = append(out.Items, &runtimeapi.PodSandbox{Id: id, Metadata: cfg.Metadata, State: st, CreatedAt: f.sbCreated[id], Labels: cfg.Labels})
	}
	return out, nil
}

// ContainerStatus gives a container's state and log path.
func (f *fakeCRI) ContainerStatus(_ context.Context, in *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.containers[in.ContainerId]
	if c == nil {
		return nil, status.Errorf(codes.NotFound, "container %s not found", in.ContainerId)
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
		Id: in.ContainerId, State: c.state, LogPath: f.logPathLocked(c),
	}}, nil
}

// ReopenContainerLog is not offered: reclaim never reopens a log.
func (f *fakeCRI) ReopenContainerLog(context.Context, *runtimeapi.ReopenContainerLogRequest, ...grpc.CallOption) (*runtimeapi.ReopenContainerLogResponse, error) {
	return nil, status.Error(codes.Unimplemented, "ReopenContainerLog")
}

func (f *fakeCRI) logPathLocked(c *fakeCtr) string {
	if sb := f.sandboxes[c.sandboxID]; sb != nil && c.cfg.LogPath != "" {
		return filepath.Join(sb.LogDirectory, c.cfg.LogPath)
	}
	return ""
}

// addSandbox puts a sandbox of the pod into the runtime, as one left by an earlier
// podsync; the workers do not see it.
func (f *fakeCRI) addSandbox(t *testing.T, pod *corev1.Pod, ready bool, created int64) string {
	t.Helper()
	cfg, err := criconfig.SandboxConfig(pod, 0, criconfig.Options{PodLogsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := "old-sb" + string(rune('a'+f.seq))
	f.sandboxes[id], f.sbReady[id], f.sbCreated[id], f.unseen[id] = cfg, ready, created, true
	return id
}

// addContainer puts an instance of the pod's container name into sandbox sbID, with a log
// file (and a rotated one) when it has a log path; the workers do not see it.
func (f *fakeCRI) addContainer(t *testing.T, pod *corev1.Pod, name, image, sbID string, st runtimeapi.ContainerState, created int64) string {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := "old-c" + string(rune('a'+f.seq))
	c := &fakeCtr{sandboxID: sbID, state: st, created: created, cfg: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Labels: map[string]string{
			criconfig.LabelPodUID: string(pod.UID), criconfig.LabelPodName: pod.Name, criconfig.LabelPodNamespace: pod.Namespace,
			criconfig.LabelContainerName: name,
		},
		LogPath: filepath.Join(name, id+".log"),
	}}
	f.containers[id], f.unseen[id] = c, true
	if p := f.logPathLocked(c); p != "" {
		writeLog(t, p)
		writeLog(t, p+".20260101-000000")
	}
	return id
}

func writeLog(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("log\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// of is the IDs of the pod's sandboxes and containers.
func (f *fakeCRI) of(uid types.UID) (sandboxes, containers []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, cfg := range f.sandboxes {
		if cfg.Labels[criconfig.LabelPodUID] == string(uid) {
			sandboxes = append(sandboxes, id)
		}
	}
	for id, c := range f.containers {
		if c.cfg.Labels[criconfig.LabelPodUID] == string(uid) {
			containers = append(containers, id)
		}
	}
	slices.Sort(sandboxes)
	slices.Sort(containers)
	return sandboxes, containers
}

// fakeImages is the runtime's images next to a fakeCRI's containers (imagegc.Runtime).
type fakeImages struct {
	*fakeCRI
	mu      sync.Mutex
	images  []*runtimeapi.Image
	removed []string
}

func (f *fakeImages) ListImages(context.Context, *runtimeapi.ListImagesRequest, ...grpc.CallOption) (*runtimeapi.ListImagesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &runtimeapi.ListImagesResponse{Images: slices.Clone(f.images)}, nil
}

func (f *fakeImages) RemoveImage(_ context.Context, in *runtimeapi.RemoveImageRequest, _ ...grpc.CallOption) (*runtimeapi.RemoveImageResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, in.Image.Image)
	f.images = slices.DeleteFunc(f.images, func(i *runtimeapi.Image) bool { return i.Id == in.Image.Image })
	return &runtimeapi.RemoveImageResponse{}, nil
}

func (f *fakeImages) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest, ...grpc.CallOption) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

// reclaimNode is a node with, after setup:
//   - runs: running, its app container with two older exited instances, and an old dead
//     sandbox;
//   - done: evicted and terminated but still wanted (its API object stays), image job:1;
//   - gone: no longer wanted, a dead container (image gone:1) and sandbox left behind by an
//     earlier podsync;
//   - orphan: no longer wanted but still running (housekeeping stops it), a dead instance
//     next to the running one.
type reclaimNode struct {
	*serviceFixture
	images                   *fakeImages
	runs, done, gone, orphan *corev1.Pod
	// The IDs of the instances set up.
	runsRunning, runsNewestDead, runsOldestDead, runsOldSandbox string
	runsOldestDeadLog, runsNewestDeadLog                        string
	orphanRunning, orphanSandbox                                string
	linkDir                                                     string
}

func newReclaimNode(t *testing.T) *reclaimNode {
	t.Helper()
	f := newServiceFixture(t, 0)
	n := &reclaimNode{serviceFixture: f, runs: newPod("runs", 1), done: newPod("done", 2), gone: newPod("gone", 3), orphan: newPod("orphan", 4), linkDir: t.TempDir()}
	n.done.Spec.Containers[0].Image = "job:1"
	f.s.SetPods("api", []*corev1.Pod{n.runs, n.done})
	waitListed(t, f.s, "runs and done running", func(l map[string]*podsyncv1.Pod) bool { return running(t, l["runs"]) && running(t, l["done"]) })
	if err := f.s.Kill(n.done.UID, nil, "Evicted", "The node was low on resource: ephemeral-storage."); err != nil {
		t.Fatal(err)
	}
	waitListed(t, f.s, "done terminated", func(l map[string]*podsyncv1.Pod) bool { return l["done"].Terminated })

	sbs, cs := f.cri.of(n.runs.UID)
	n.runsRunning = cs[0]
	n.runsOldestDead = f.cri.addContainer(t, n.runs, "app", "busybox:1", sbs[0], runtimeapi.ContainerState_CONTAINER_EXITED, -20)
	n.runsNewestDead = f.cri.addContainer(t, n.runs, "app", "busybox:1", sbs[0], runtimeapi.ContainerState_CONTAINER_EXITED, -10)
	n.runsOldSandbox = f.cri.addSandbox(t, n.runs, false, -30)
	f.cri.mu.Lock()
	n.runsOldestDeadLog = f.cri.logPathLocked(f.cri.containers[n.runsOldestDead])
	n.runsNewestDeadLog = f.cri.logPathLocked(f.cri.containers[n.runsNewestDead])
	f.cri.mu.Unlock()

	goneSb := f.cri.addSandbox(t, n.gone, false, -5)
	f.cri.addContainer(t, n.gone, "app", "gone:1", goneSb, runtimeapi.ContainerState_CONTAINER_EXITED, -4)
	n.orphanSandbox = f.cri.addSandbox(t, n.orphan, true, -3)
	f.cri.addContainer(t, n.orphan, "app", "orphan:1", n.orphanSandbox, runtimeapi.ContainerState_CONTAINER_EXITED, -2)
	n.orphanRunning = f.cri.addContainer(t, n.orphan, "app", "orphan:1", n.orphanSandbox, runtimeapi.ContainerState_CONTAINER_RUNNING, -1)

	n.images = &fakeImages{fakeCRI: f.cri, images: []*runtimeapi.Image{
		{Id: "busybox:1", RepoTags: []string{"busybox:1"}, Size: 1},
		{Id: "job:1", RepoTags: []string{"job:1"}, Size: 10},
		{Id: "gone:1", RepoTags: []string{"gone:1"}, Size: 100},
		{Id: "orphan:1", RepoTags: []string{"orphan:1"}, Size: 1000},
		{Id: "unused:1", RepoTags: []string{"unused:1"}, Size: 10000},
		{Id: "pause:1", RepoTags: []string{"pause:1"}, Size: 100000},
		{Id: "pinned:1", RepoTags: []string{"pinned:1"}, Size: 1000000, Pinned: true},
	}}
	return n
}

func (n *reclaimNode) server() *Server {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	gc := imagegc.New(n.images, imagegc.Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, Keep: []string{"pause:1"}}, n.clk, nil, log)
	logs := containerlogs.New(n.cri, n.linkDir, containerlogs.Policy{}, n.clk, nil, log)
	return NewServer(n.s, nil, nil, &diskReclaimer{rt: n.cri, pods: n.s, images: gc, logs: logs, log: log})
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestReclaimDisk: the kubelet's node-level reclaim. Dead containers and sandboxes of pods
// that no longer run go; a running pod keeps its newest dead instance of each container;
// nothing that runs is touched; with images, every image no container uses goes but the
// sandbox image and pinned ones.
func TestReclaimDisk(t *testing.T) {
	for _, images := range []bool{false, true} {
		t.Run(map[bool]string{false: "nodefs: containers", true: "imagefs: containers and images"}[images], func(t *testing.T) {
			n := newReclaimNode(t)
			n.s.SetPods("file", nil) // every source has reported
			resp, err := n.server().ReclaimDisk(context.Background(), &podsyncv1.ReclaimDiskRequest{Images: images})
			if err != nil {
				t.Fatalf("ReclaimDisk: %v", err)
			}

			// runs: the running instance and the newest dead one stay, the older dead one
			// and the old sandbox go, with the log files of what went.
			sbs, cs := n.cri.of(n.runs.UID)
			if want := slices.Sorted(slices.Values([]string{n.runsNewestDead, n.runsRunning})); !slices.Equal(cs, want) {
				t.Errorf("runs has containers %v, want %v (running and the newest dead)", cs, want)
			}
			if len(sbs) != 1 || slices.Contains(sbs, n.runsOldSandbox) {
				t.Errorf("runs has sandboxes %v, want its ready one only", sbs)
			}
			if exists(n.runsOldestDeadLog) || exists(n.runsOldestDeadLog+".20260101-000000") {
				t.Errorf("the removed container's logs are still there")
			}
			if !exists(n.runsNewestDeadLog) {
				t.Errorf("the kept dead container's log is gone")
			}
			// done and gone: nothing left.
			for _, p := range []*corev1.Pod{n.done, n.gone} {
				if sbs, cs := n.cri.of(p.UID); len(sbs)+len(cs) > 0 {
					t.Errorf("%s still has sandboxes %v and containers %v", p.Name, sbs, cs)
				}
			}
			// orphan: what runs stays, its dead instance goes.
			sbs, cs = n.cri.of(n.orphan.UID)
			if !slices.Equal(cs, []string{n.orphanRunning}) || !slices.Equal(sbs, []string{n.orphanSandbox}) {
				t.Errorf("orphan has sandboxes %v and containers %v, want only what runs: %s in %s", sbs, cs, n.orphanRunning, n.orphanSandbox)
			}

			want := &podsyncv1.ReclaimDiskResponse{ContainersRemoved: 4, SandboxesRemoved: 3}
			wantRemoved := []string(nil)
			if images {
				want.ImagesRemoved, want.ImageBytesFreed = 3, 10110
				wantRemoved = []string{"gone:1", "job:1", "unused:1"}
			}
			if resp.ContainersRemoved != want.ContainersRemoved || resp.SandboxesRemoved != want.SandboxesRemoved ||
				resp.ImagesRemoved != want.ImagesRemoved || resp.ImageBytesFreed != want.ImageBytesFreed {
				t.Errorf("response %v, want %v", resp, want)
			}
			n.images.mu.Lock()
			removed := slices.Sorted(slices.Values(n.images.removed))
			n.images.mu.Unlock()
			if !slices.Equal(removed, wantRemoved) {
				t.Errorf("removed images %v, want %v", removed, wantRemoved)
			}

			// done keeps its final status, though its containers are gone.
			again := n.done.DeepCopy()
			again.ResourceVersion = "2"
			again.Labels = map[string]string{"version": "2"}
			n.s.SetPods("api", []*corev1.Pod{n.runs, again})
			l := waitListed(t, n.s, "done synced again", func(l map[string]*podsyncv1.Pod) bool {
				return l["done"] != nil && l["done"].Pod != nil && strings.Contains(string(l["done"].Pod), `"resourceVersion":"2"`)
			})
			st := podStatus(t, l["done"])
			if st.Phase != corev1.PodFailed || st.Reason != "Evicted" || len(st.ContainerStatuses) != 1 || st.ContainerStatuses[0].State.Terminated == nil {
				t.Errorf("done after reclaim: phase %s reason %q containers %+v, want its final status", st.Phase, st.Reason, st.ContainerStatuses)
			}
			if !running(t, l["runs"]) {
				t.Errorf("runs no longer runs")
			}
		})
	}
}

// TestReclaimDiskBeforeEverySourceReported: a pod unknown to podsync may only not be known
// yet: what the runtime has of it stays, and a terminated pod keeps its newest dead
// instances as a running one does.
func TestReclaimDiskBeforeEverySourceReported(t *testing.T) {
	n := newReclaimNode(t) // the file source has not reported
	resp, err := n.server().ReclaimDisk(context.Background(), &podsyncv1.ReclaimDiskRequest{})
	if err != nil {
		t.Fatalf("ReclaimDisk: %v", err)
	}
	if resp.ContainersRemoved != 1 || resp.SandboxesRemoved != 1 {
		t.Errorf("response %v, want 1 container and 1 sandbox removed: runs' oldest dead instance and old sandbox", resp)
	}
	for _, p := range []*corev1.Pod{n.done, n.gone} {
		if sbs, cs := n.cri.of(p.UID); len(sbs) != 1 || len(cs) != 1 {
			t.Errorf("%s has sandboxes %v and containers %v, want its newest of each kept", p.Name, sbs, cs)
		}
	}
	if _, cs := n.cri.of(n.runs.UID); slices.Contains(cs, n.runsOldestDead) {
		t.Errorf("runs' oldest dead instance was kept")
	}
}

// failingList is a runtime whose lists fail.
type failingList struct{ *fakeCRI }

func (failingList) ListContainers(context.Context, *runtimeapi.ListContainersRequest, ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	return nil, errors.New("runtime down")
}

func TestReclaimDiskRuntimeDown(t *testing.T) {
	f := newServiceFixture(t, 0)
	srv := NewServer(f.s, nil, nil, &diskReclaimer{rt: failingList{f.cri}, pods: f.s, log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if _, err := srv.ReclaimDisk(context.Background(), &podsyncv1.ReclaimDiskRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("ReclaimDisk with the runtime down: %v, want UNAVAILABLE", err)
	}
}

// TestNewerInstanceByAttempt: the instance kept when dead ones are removed is the highest
// attempt, even when its creation time is earlier (the wall clock stepped back between).
func TestNewerInstanceByAttempt(t *testing.T) {
	ctr := func(attempt uint32, created int64) *runtimeapi.Container {
		return &runtimeapi.Container{Metadata: &runtimeapi.ContainerMetadata{Attempt: attempt}, CreatedAt: created}
	}
	sb := func(attempt uint32, created int64) *runtimeapi.PodSandbox {
		return &runtimeapi.PodSandbox{Metadata: &runtimeapi.PodSandboxMetadata{Attempt: attempt}, CreatedAt: created}
	}
	if !newerContainer(ctr(4, 100), ctr(3, 300)) || newerContainer(ctr(3, 300), ctr(4, 100)) {
		t.Errorf("attempt 4 created at 100 is not newer than attempt 3 created at 300")
	}
	if !newerContainer(ctr(2, 200), ctr(2, 100)) {
		t.Errorf("for one attempt, the later creation is not newer")
	}
	if !newerSandbox(sb(1, 100), sb(0, 300)) || newerSandbox(sb(0, 300), sb(1, 100)) {
		t.Errorf("sandbox attempt 1 created at 100 is not newer than attempt 0 created at 300")
	}
}
