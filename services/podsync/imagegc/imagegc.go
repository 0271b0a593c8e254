// Package imagegc removes unused images when the image filesystem fills up, as the
// kubelet's image garbage collection does: above imageGCHighThresholdPercent of the disk,
// images no container uses are removed, least recently used first, until usage is down to
// imageGCLowThresholdPercent. Images younger than imageMinimumGCAge and pinned images
// (the sandbox image) are kept. Under disk pressure, unitlet-eviction has every unused
// image removed at once (RemoveUnused).
package imagegc

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// Period is how often usage is checked (the kubelet's 5 minutes).
const Period = 5 * time.Minute

// Runtime is what image GC needs of the CRI runtime.
type Runtime interface {
	ListImages(ctx context.Context, in *runtimeapi.ListImagesRequest, opts ...grpc.CallOption) (*runtimeapi.ListImagesResponse, error)
	RemoveImage(ctx context.Context, in *runtimeapi.RemoveImageRequest, opts ...grpc.CallOption) (*runtimeapi.RemoveImageResponse, error)
	ImageFsInfo(ctx context.Context, in *runtimeapi.ImageFsInfoRequest, opts ...grpc.CallOption) (*runtimeapi.ImageFsInfoResponse, error)
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
}

// Policy is the kubelet configuration's image GC settings.
type Policy struct {
	HighThresholdPercent int
	LowThresholdPercent  int
	MinAge               time.Duration
	// MaxAge removes an image unused for longer than this, whatever the disk's usage
	// (imageMaximumGCAge); 0 keeps images of any age. An image never used counts from
	// when this process first saw it.
	MaxAge time.Duration
	// Keep are image references never removed (the sandbox image).
	Keep []string
}

// Usage is the image filesystem's capacity and what images use of it.
type Usage struct{ Capacity, Used uint64 }

// Manager runs image GC.
type Manager struct {
	rt      Runtime
	policy  Policy
	clk     clock.Clock
	log     *slog.Logger
	usage   func(ctx context.Context) (Usage, error)
	removed prometheus.Counter
	freed   prometheus.Counter

	// passMu makes one pass at a time remove images (the periodic one and RemoveUnused).
	passMu sync.Mutex

	mu        sync.Mutex
	firstSeen map[string]time.Time // image ID -> when first seen
	lastUsed  map[string]time.Time // image ID -> when last seen used by a container
}

// New returns a manager; usage nil means: the runtime's ImageFsInfo for what is used, the
// file system's size (statfs of its mount point) for the capacity.
func New(rt Runtime, policy Policy, clk clock.Clock, reg prometheus.Registerer, log *slog.Logger) *Manager {
	m := &Manager{
		rt: rt, policy: policy, clk: clk, log: log,
		firstSeen: map[string]time.Time{}, lastUsed: map[string]time.Time{},
		removed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "unitlet_podsync_image_gc_removed_images_total",
			Help: "Images removed by image garbage collection.",
		}),
		freed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "unitlet_podsync_image_gc_freed_bytes_total",
			Help: "Bytes freed by image garbage collection.",
		}),
	}
	m.usage = m.runtimeUsage
	if reg != nil {
		reg.MustRegister(m.removed, m.freed)
	}
	return m
}

// Run checks usage every Period until ctx ends. GC is off when the high threshold is 100
// (as the kubelet's, age included): Run then only waits for ctx, as an actor of the
// process that must not end it.
func (m *Manager) Run(ctx context.Context) error {
	if m.policy.HighThresholdPercent >= 100 {
		m.log.Info("image garbage collection is off (imageGCHighThresholdPercent: 100)")
		<-ctx.Done()
		return nil
	}
	m.log.Info("image garbage collection", "highPercent", m.policy.HighThresholdPercent, "lowPercent", m.policy.LowThresholdPercent, "minAge", m.policy.MinAge, "maxAge", m.policy.MaxAge, "keep", m.policy.Keep)
	t := m.clk.NewTimer(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		if _, err := m.Collect(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("image garbage collection", "err", err)
		}
		t.Reset(Period)
	}
}

func (m *Manager) runtimeUsage(ctx context.Context) (Usage, error) {
	info, err := m.rt.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		return Usage{}, fmt.Errorf("image filesystem info: %w", err)
	}
	fss := info.GetImageFilesystems()
	if len(fss) == 0 {
		return Usage{}, fmt.Errorf("image filesystem info: the runtime reports none")
	}
	fs := fss[0]
	var st unix.Statfs_t
	if err := unix.Statfs(fs.GetFsId().GetMountpoint(), &st); err != nil {
		return Usage{}, fmt.Errorf("statfs %s: %w", fs.GetFsId().GetMountpoint(), err)
	}
	capacity := st.Blocks * uint64(st.Bsize)
	used := capacity - st.Bavail*uint64(st.Bsize)
	return Usage{Capacity: capacity, Used: used}, nil
}

// Collect removes unused images when usage is above the high threshold; it returns the
// bytes freed.
func (m *Manager) Collect(ctx context.Context) (uint64, error) {
	m.passMu.Lock()
	defer m.passMu.Unlock()
	candidates, err := m.candidates(ctx)
	if err != nil {
		return 0, err
	}
	candidates = m.removeOld(ctx, candidates)
	u, err := m.usage(ctx)
	if err != nil {
		return 0, err
	}
	if u.Capacity == 0 || u.Used*100 < u.Capacity*uint64(m.policy.HighThresholdPercent) {
		return 0, nil
	}
	target := u.Capacity * uint64(m.policy.LowThresholdPercent) / 100
	need := u.Used - min(u.Used, target)
	m.log.Info("image filesystem above the high threshold: removing unused images",
		"usedPercent", u.Used*100/u.Capacity, "high", m.policy.HighThresholdPercent, "low", m.policy.LowThresholdPercent, "toFree", need, "candidates", len(candidates))
	var freed uint64
	for _, img := range candidates {
		if freed >= need {
			break
		}
		if m.remove(ctx, img) {
			freed += img.GetSize()
		}
	}
	if freed < need {
		return freed, fmt.Errorf("freed %d of the %d bytes needed to get below %d%% of the image filesystem", freed, need, m.policy.LowThresholdPercent)
	}
	return freed, nil
}

// removeOld removes the candidates unused for longer than the maximum age and returns
// the others.
func (m *Manager) removeOld(ctx context.Context, candidates []*runtimeapi.Image) []*runtimeapi.Image {
	if m.policy.MaxAge <= 0 {
		return candidates
	}
	now := m.clk.Now()
	var left []*runtimeapi.Image
	for _, img := range candidates {
		if idle := now.Sub(m.lastUse(img.GetId())); idle > m.policy.MaxAge {
			m.log.Info("removing an image unused for longer than imageMaximumGCAge", "image", img.GetId(), "tags", img.GetRepoTags(), "unusedFor", idle.Round(time.Second), "maxAge", m.policy.MaxAge)
			if m.remove(ctx, img) {
				continue
			}
		}
		left = append(left, img)
	}
	return left
}

// lastUse is when the image was last seen used, or first seen if never.
func (m *Manager) lastUse(id string) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastUseLocked(id)
}

func (m *Manager) lastUseLocked(id string) time.Time {
	if t, ok := m.lastUsed[id]; ok {
		return t
	}
	return m.firstSeen[id]
}

// RemoveUnused removes every image no container uses, whatever the disk's usage, as the
// kubelet's eviction manager does under disk pressure (DeleteUnusedImages): images in use
// by any container, running or not, pinned images, the kept ones (the sandbox image) and
// images younger than imageMinimumGCAge stay. It returns how many images went and their
// sizes as the runtime reported them.
func (m *Manager) RemoveUnused(ctx context.Context) (removed int, freed uint64, err error) {
	m.passMu.Lock()
	defer m.passMu.Unlock()
	candidates, err := m.candidates(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, img := range candidates {
		if m.remove(ctx, img) {
			removed++
			freed += img.GetSize()
		}
	}
	return removed, freed, nil
}

// candidates are the images that may be removed, least recently used first (never used:
// by when first seen): no container uses them, they are not pinned or kept, and they are
// older than the minimum age. It records when each image was first seen and last used.
func (m *Manager) candidates(ctx context.Context) ([]*runtimeapi.Image, error) {
	images, err := m.rt.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	ctrs, err := m.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	now := m.clk.Now()
	inUse := map[string]bool{}
	for _, c := range ctrs.GetContainers() {
		inUse[c.GetImageRef()] = true
		inUse[c.GetImage().GetImage()] = true
	}
	keep := map[string]bool{}
	for _, k := range m.policy.Keep {
		keep[k] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	var candidates []*runtimeapi.Image
	for _, img := range images.GetImages() {
		id := img.GetId()
		seen[id] = true
		if _, ok := m.firstSeen[id]; !ok {
			m.firstSeen[id] = now
		}
		used := inUse[id]
		for _, t := range img.GetRepoTags() {
			used = used || inUse[t]
		}
		for _, d := range img.GetRepoDigests() {
			used = used || inUse[d]
		}
		if used {
			m.lastUsed[id] = now
			continue
		}
		pinned := img.GetPinned()
		for _, t := range img.GetRepoTags() {
			pinned = pinned || keep[t]
		}
		if pinned || now.Sub(m.firstSeen[id]) < m.policy.MinAge {
			continue
		}
		candidates = append(candidates, img)
	}
	for id := range m.firstSeen {
		if !seen[id] {
			delete(m.firstSeen, id)
			delete(m.lastUsed, id)
		}
	}
	sort.SliceStable(candidates, func(i, j int) bool {
		return m.lastUseLocked(candidates[i].GetId()).Before(m.lastUseLocked(candidates[j].GetId()))
	})
	return candidates, nil
}

// remove removes one image; a failure is logged and skipped, as the kubelet goes on with
// the next image.
func (m *Manager) remove(ctx context.Context, img *runtimeapi.Image) bool {
	if _, err := m.rt.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: img.GetId()}}); err != nil {
		m.log.Warn("remove image", "image", img.GetId(), "tags", img.GetRepoTags(), "err", err)
		return false
	}
	m.removed.Inc()
	m.freed.Add(float64(img.GetSize()))
	m.log.Info("removed unused image", "image", img.GetId(), "tags", img.GetRepoTags(), "bytes", img.GetSize())
	return true
}
