package imagegc

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

type fakeRuntime struct {
	images  []*runtimeapi.Image
	ctrs    []*runtimeapi.Container
	removed []string
}

func (f *fakeRuntime) ListImages(context.Context, *runtimeapi.ListImagesRequest, ...grpc.CallOption) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{Images: f.images}, nil
}

func (f *fakeRuntime) RemoveImage(_ context.Context, in *runtimeapi.RemoveImageRequest, _ ...grpc.CallOption) (*runtimeapi.RemoveImageResponse, error) {
	f.removed = append(f.removed, in.Image.Image)
	f.images = slices.DeleteFunc(f.images, func(i *runtimeapi.Image) bool { return i.Id == in.Image.Image })
	return &runtimeapi.RemoveImageResponse{}, nil
}

func (f *fakeRuntime) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest, ...grpc.CallOption) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest, ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{Containers: f.ctrs}, nil
}

func TestCollect(t *testing.T) {
	img := func(id, tag string, size uint64) *runtimeapi.Image {
		return &runtimeapi.Image{Id: id, RepoTags: []string{tag}, Size: size}
	}
	for _, tc := range []struct {
		name        string
		used        uint64
		wantRemoved []string
	}{
		{name: "below the high threshold: nothing", used: 84},
		{name: "above it: least recently used first until below the low threshold", used: 90, wantRemoved: []string{"old", "older-used"}},
		{name: "far above: every candidate, still short", used: 99, wantRemoved: []string{"old", "older-used", "recent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			rt := &fakeRuntime{
				images: []*runtimeapi.Image{
					img("old", "a:1", 6), img("older-used", "b:1", 6), img("recent", "c:1", 6),
					img("inuse", "d:1", 50), img("sandbox", "pause:1", 1),
				},
				ctrs: []*runtimeapi.Container{{Image: &runtimeapi.ImageSpec{Image: "d:1"}, ImageRef: "inuse"}, {Image: &runtimeapi.ImageSpec{Image: "b:1"}, ImageRef: "older-used"}, {Image: &runtimeapi.ImageSpec{Image: "c:1"}, ImageRef: "recent"}},
			}
			m := New(rt, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, Keep: []string{"pause:1"}}, clk, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			m.usage = func(context.Context) (Usage, error) { return Usage{Capacity: 100, Used: tc.used}, nil }
			// First look: b and c in use, a too young (an error when above the threshold:
			// nothing can be freed).
			_, _ = m.Collect(context.Background())
			if len(rt.removed) > 0 {
				t.Fatalf("removed %v at the first look: every image is younger than imageMinimumGCAge", rt.removed)
			}
			// b stops being used, then c; later everything is old enough.
			clk.Step(time.Minute)
			rt.ctrs = rt.ctrs[:2]
			rt.ctrs[1] = &runtimeapi.Container{Image: &runtimeapi.ImageSpec{Image: "c:1"}, ImageRef: "recent"}
			_, _ = m.Collect(context.Background())
			clk.Step(5 * time.Minute)
			rt.ctrs = rt.ctrs[:1]
			_, err := m.Collect(context.Background())
			if tc.used == 99 && err == nil {
				t.Errorf("freeing less than needed gave no error")
			}
			if !slices.Equal(rt.removed, tc.wantRemoved) {
				t.Errorf("removed %v, want %v", rt.removed, tc.wantRemoved)
			}
		})
	}
}

// TestRemoveUnused: whatever the disk's usage, every image no container uses goes, but
// for pinned and kept images and those younger than the minimum age.
func TestRemoveUnused(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := &fakeRuntime{
		images: []*runtimeapi.Image{
			{Id: "unused-a", RepoTags: []string{"a:1"}, Size: 10},
			{Id: "unused-b", RepoDigests: []string{"b@sha256:1"}, Size: 20},
			{Id: "running", RepoTags: []string{"r:1"}, Size: 100},
			{Id: "exited", RepoTags: []string{"e:1"}, Size: 100},
			{Id: "by-digest", RepoDigests: []string{"d@sha256:2"}, Size: 100},
			{Id: "pinned", RepoTags: []string{"p:1"}, Size: 100, Pinned: true},
			{Id: "sandbox", RepoTags: []string{"pause:1"}, Size: 100},
		},
		ctrs: []*runtimeapi.Container{
			{Image: &runtimeapi.ImageSpec{Image: "r:1"}, ImageRef: "running", State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			{Image: &runtimeapi.ImageSpec{Image: "e:1"}, ImageRef: "exited", State: runtimeapi.ContainerState_CONTAINER_EXITED},
			{Image: &runtimeapi.ImageSpec{Image: "d@sha256:2"}, State: runtimeapi.ContainerState_CONTAINER_CREATED},
		},
	}
	m := New(rt, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, Keep: []string{"pause:1"}}, clk, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.usage = func(context.Context) (Usage, error) { return Usage{Capacity: 100, Used: 1}, nil }

	n, _, err := m.RemoveUnused(context.Background())
	if err != nil || n != 0 || len(rt.removed) > 0 {
		t.Fatalf("first look: removed %v (%d, %v), want nothing: every image is younger than imageMinimumGCAge", rt.removed, n, err)
	}
	clk.Step(3 * time.Minute)
	rt.images = append(rt.images, &runtimeapi.Image{Id: "just-pulled", RepoTags: []string{"new:1"}, Size: 5})
	n, freed, err := m.RemoveUnused(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rt.removed)
	if want := []string{"unused-a", "unused-b"}; !slices.Equal(rt.removed, want) || n != 2 || freed != 30 {
		t.Errorf("removed %v: %d images, %d bytes; want %v, 2 images, 30 bytes", rt.removed, n, freed, want)
	}
}

// imageMaximumGCAge: an image unused for longer goes even with the disk nearly empty; one
// used since, a running one and one never used for less than the age stay.
func TestCollectRemovesImagesUnusedForLongerThanTheMaximumAge(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := &fakeRuntime{
		images: []*runtimeapi.Image{
			{Id: "idle", RepoTags: []string{"idle:1"}, Size: 10},
			{Id: "was-used", RepoTags: []string{"u:1"}, Size: 10},
			{Id: "running", RepoTags: []string{"r:1"}, Size: 10},
		},
		ctrs: []*runtimeapi.Container{
			{Image: &runtimeapi.ImageSpec{Image: "r:1"}, ImageRef: "running"},
			{Image: &runtimeapi.ImageSpec{Image: "u:1"}, ImageRef: "was-used"},
		},
	}
	m := New(rt, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MaxAge: time.Hour}, clk, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.usage = func(context.Context) (Usage, error) { return Usage{Capacity: 100, Used: 1}, nil }
	collect := func() {
		t.Helper()
		if _, err := m.Collect(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	collect()
	clk.Step(40 * time.Minute)
	collect()
	rt.ctrs = rt.ctrs[:1] // was-used's container is gone, last seen at 40 minutes
	collect()
	rt.images = append(rt.images, &runtimeapi.Image{Id: "new", RepoTags: []string{"new:1"}, Size: 10})
	collect()
	if len(rt.removed) > 0 {
		t.Fatalf("removed %v within the maximum age", rt.removed)
	}
	clk.Step(21 * time.Minute) // idle: 61 minutes unused; was-used: 21; new: 21
	collect()
	if !slices.Equal(rt.removed, []string{"idle"}) {
		t.Errorf("removed %v, want only idle", rt.removed)
	}
}

// GC off must not end podsync: Run is one of the process's actors, and its return stops
// them all.
func TestRunWithGCOffWaitsForTheEnd(t *testing.T) {
	m := New(nil, Policy{HighThresholdPercent: 100, LowThresholdPercent: 99}, clocktesting.NewFakeClock(time.Now()), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("Run with imageGCHighThresholdPercent 100 returned before its context ended: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after the end: %v, want nil", err)
	}
}
