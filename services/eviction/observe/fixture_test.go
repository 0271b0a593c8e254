package observe

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/shared/cri"
)

var _ Runtime = (*cri.Client)(nil)

// fakeRuntime answers the CRI calls from fixed replies.
type fakeRuntime struct {
	imageFs    *runtimeapi.ImageFsInfoResponse
	imageFsErr error
	containers []*runtimeapi.Container
	stats      []*runtimeapi.ContainerStats
	listErr    error
}

func (f *fakeRuntime) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest, ...grpc.CallOption) (*runtimeapi.ImageFsInfoResponse, error) {
	return f.imageFs, f.imageFsErr
}

// ListContainers ignores the filter, as a sloppy runtime might: Pods must check the state.
func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest, ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{Containers: f.containers}, f.listErr
}

func (f *fakeRuntime) ListContainerStats(context.Context, *runtimeapi.ListContainerStatsRequest, ...grpc.CallOption) (*runtimeapi.ListContainerStatsResponse, error) {
	return &runtimeapi.ListContainerStatsResponse{Stats: f.stats}, f.listErr
}

// imageFsAt is an ImageFsInfo reply naming image and container mount points ("" leaves
// the container file systems out).
func imageFsAt(image, container string) *runtimeapi.ImageFsInfoResponse {
	r := &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{
		FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: image}, UsedBytes: &runtimeapi.UInt64Value{Value: 1},
	}}}
	if container != "" {
		r.ContainerFilesystems = []*runtimeapi.FilesystemUsage{{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: container}}}
	}
	return r
}

// write writes content to dir/rel, making the directories.
func write(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// procFixture is a /proc with meminfo (MemTotal 8 GiB), the PID limits and loadavg.
func procFixture(t *testing.T) string {
	t.Helper()
	proc := t.TempDir()
	write(t, proc, "meminfo", "MemTotal:        8388608 kB\nMemFree:         1000000 kB\nMemAvailable:    4000000 kB\n")
	write(t, proc, "sys/kernel/pid_max", "4194304\n")
	write(t, proc, "sys/kernel/threads-max", "60000\n")
	write(t, proc, "loadavg", "0.52 0.58 0.59 3/1234 98765\n")
	return proc
}

const gib = int64(1) << 30

// tmpfsDir is a fresh tmpfs mounted in a temporary directory, unmounted at the end: another
// device than the temporary directories. It needs root.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mountTmpfs(t, dir)
	return dir
}

// mountTmpfs mounts a small tmpfs on dir until the test ends; it needs root.
func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test mounts a tmpfs and must run as root (CAP_SYS_ADMIN), as make test does; running as euid %d", os.Geteuid())
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}
