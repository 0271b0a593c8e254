package containerlogs

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// oneContainer is a runtime with one running container whose log is path; a reopen
// creates the file anew, as the runtime does.
type oneContainer struct {
	id, path string
	reopens  int
}

func (r *oneContainer) ListContainers(context.Context, *runtimeapi.ListContainersRequest, ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{{Id: r.id, State: runtimeapi.ContainerState_CONTAINER_RUNNING}}}, nil
}

func (r *oneContainer) ContainerStatus(_ context.Context, in *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	if in.GetContainerId() != r.id {
		return nil, status.Error(codes.NotFound, "no such container")
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
		Id: r.id, State: runtimeapi.ContainerState_CONTAINER_RUNNING, LogPath: r.path,
		Labels: map[string]string{labelPodName: "web", labelPodNamespace: "shop", labelContainerName: "app"},
	}}, nil
}

func (r *oneContainer) ReopenContainerLog(context.Context, *runtimeapi.ReopenContainerLogRequest, ...grpc.CallOption) (*runtimeapi.ReopenContainerLogResponse, error) {
	r.reopens++
	return &runtimeapi.ReopenContainerLogResponse{}, os.WriteFile(r.path, nil, 0o640)
}

func TestRotationKeepsMaxFilesAndCompressesAllButNewest(t *testing.T) {
	dir := t.TempDir()
	rt := &oneContainer{id: "0123456789ab", path: filepath.Join(dir, "app", "0.log")}
	if err := os.MkdirAll(filepath.Dir(rt.path), 0o755); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	m := New(rt, filepath.Join(dir, "links"), Policy{MaxSize: 10, MaxFiles: 3, Workers: 2, Interval: 3 * time.Second}, clk, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for i := range 5 {
		if err := os.WriteFile(rt.path, []byte(strings.Repeat("x", 10+i)), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := m.RotateAll(context.Background()); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Minute)
	}
	// A log under MaxSize stays.
	if err := os.WriteFile(rt.path, []byte("short"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := m.RotateAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(rt.path + "*")
	want := []string{rt.path, rt.path + ".20260102-030705.gz", rt.path + ".20260102-030805"}
	if strings.Join(files, " ") != strings.Join(want, " ") || rt.reopens != 5 {
		t.Errorf("files %q after %d reopens, want %q after 5", files, rt.reopens, want)
	}
}

func TestLinkMadeAtStartAndRemovedWithTheLogs(t *testing.T) {
	dir := t.TempDir()
	rt := &oneContainer{id: "0123456789ab", path: filepath.Join(dir, "0.log")}
	for _, f := range []string{rt.path, rt.path + ".20260102-030405.gz", rt.path + ".20260102-030505"} {
		if err := os.WriteFile(f, []byte("x"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	links := filepath.Join(dir, "links")
	m := New(rt, links, Policy{}, clocktesting.NewFakeClock(time.Now()), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := m.Started(context.Background(), rt.id); err != nil {
		t.Fatal(err)
	}
	l := filepath.Join(links, "web_shop_app-0123456789ab.log")
	if got, err := os.Readlink(l); err != nil || got != rt.path {
		t.Fatalf("link %s -> %q (%v), want -> %s", l, got, err, rt.path)
	}
	if err := m.Removing(context.Background(), rt.id); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*", "*")); len(left) != 0 {
		t.Errorf("left after removal: %q", left)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "0.log*")); len(left) != 0 {
		t.Errorf("log files left after removal: %q", left)
	}
}

func TestDanglingLinksOfGoneContainersAreRemoved(t *testing.T) {
	dir := t.TempDir()
	rt := &oneContainer{id: "0123456789ab", path: filepath.Join(dir, "0.log")}
	gone := filepath.Join(dir, "old_shop_app-fedcba987654.log")
	// The running container's log is between a rename and the reopen: its link stays.
	rotating := filepath.Join(dir, "web_shop_app-0123456789ab.log")
	for _, l := range []string{gone, rotating} {
		if err := os.Symlink(filepath.Join(dir, "missing.log"), l); err != nil {
			t.Fatal(err)
		}
	}
	m := New(rt, dir, Policy{}, clocktesting.NewFakeClock(time.Now()), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.removeDanglingLinks(context.Background())
	if _, err := os.Lstat(gone); !os.IsNotExist(err) {
		t.Errorf("the link of a gone container stays (%v)", err)
	}
	if _, err := os.Lstat(rotating); err != nil {
		t.Errorf("the link of a running container is gone: %v", err)
	}
}

func TestPolicyErrorsNameTheField(t *testing.T) {
	for field, kc := range map[string]kubeletv1beta1.KubeletConfiguration{
		"containerLogMaxSize":         {ContainerLogMaxSize: "ten"},
		"containerLogMaxFiles":        {ContainerLogMaxFiles: ptr.To[int32](1)},
		"containerLogMaxWorkers":      {ContainerLogMaxWorkers: ptr.To[int32](0)},
		"containerLogMonitorInterval": {ContainerLogMonitorInterval: &metav1.Duration{Duration: time.Second}},
	} {
		if _, err := PolicyOf(&kc); err == nil || !strings.HasPrefix(err.Error(), field) {
			t.Errorf("%s: error %v, want one naming it", field, err)
		}
	}
	p, err := PolicyOf(&kubeletv1beta1.KubeletConfiguration{})
	if want := (Policy{MaxSize: 10 << 20, MaxFiles: 5, Workers: 1, Interval: 10 * time.Second}); err != nil || p != want {
		t.Errorf("defaults %+v (%v), want the kubelet's %+v", p, err, want)
	}
}

// TestCollectRemovesGonePodsDirsAndTheirLinks: the directories of pods whose content may
// go are removed with everything in them, the others stay; the links into the removed
// directories then dangle and go in the same pass.
func TestCollectRemovesGonePodsDirsAndTheirLinks(t *testing.T) {
	root, links := t.TempDir(), t.TempDir()
	logOf := func(dir string) string { return filepath.Join(root, dir, "app", "0.log") }
	for _, d := range []string{"default_gone_uid-gone", "default_kept_uid-kept"} {
		if err := os.MkdirAll(filepath.Dir(logOf(d)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(logOf(d), []byte("x\n"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	goneLink := linkName(links, "gone", "default", "app", "aaaaaaaaaaaa")
	keptLink := linkName(links, "kept", "default", "app", "bbbbbbbbbbbb")
	for target, l := range map[string]string{logOf("default_gone_uid-gone"): goneLink, logOf("default_kept_uid-kept"): keptLink} {
		if err := link(target, l); err != nil {
			t.Fatal(err)
		}
	}
	asked := 0
	content := func() func(types.UID) bool {
		asked++
		return func(uid types.UID) bool { return uid == "uid-gone" }
	}
	// The runtime no longer knows either container.
	m := New(&oneContainer{id: "cccccccccccc"}, links, Policy{MaxSize: 10, MaxFiles: 2, Workers: 1, Interval: time.Second},
		clocktesting.NewFakeClock(time.Unix(0, 0)), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.CollectPodDirs(root, content)
	m.collect(t.Context())

	if asked != 1 {
		t.Errorf("the pods' content was asked %d times in one pass, want once", asked)
	}
	dirs, _ := os.ReadDir(root)
	var left []string
	for _, d := range dirs {
		left = append(left, d.Name())
	}
	if !slices.Equal(left, []string{"default_kept_uid-kept"}) {
		t.Errorf("pod log directories left: %q, want only the kept pod's", left)
	}
	if _, err := os.Lstat(goneLink); !os.IsNotExist(err) {
		t.Errorf("the link into the removed directory: %v, want it gone", err)
	}
	if _, err := os.Stat(keptLink); err != nil {
		t.Errorf("the kept pod's link: %v", err)
	}
}

func TestCollectKeepsEverythingWhenNoContentMayGo(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "default_web_uid-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	removed, err := removePodDirs(root, func() func(types.UID) bool { return func(types.UID) bool { return false } })
	if err != nil || len(removed) != 0 {
		t.Fatalf("removed %q, %v; want nothing", removed, err)
	}
	if _, err := removePodDirs(filepath.Join(root, "missing"), func() func(types.UID) bool { return func(types.UID) bool { return true } }); err == nil {
		t.Errorf("a podLogsDir that cannot be listed: no error")
	}
}
