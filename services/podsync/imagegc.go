package podsync

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/services/podsync/imagegc"
	"github.com/unitlet/unitlet/shared/cri"
)

// newImageGC returns image garbage collection by the configuration's disk thresholds; it
// keeps the runtime's sandbox image.
func newImageGC(ctx context.Context, kc *kubeletv1beta1.KubeletConfiguration, rt *cri.Client, clk clock.WithTicker, reg prometheus.Registerer, log *slog.Logger) *imagegc.Manager {
	return imagegc.New(rt, imagegc.Policy{
		HighThresholdPercent: int(ptr.Deref(kc.ImageGCHighThresholdPercent, 85)),
		LowThresholdPercent:  int(ptr.Deref(kc.ImageGCLowThresholdPercent, 80)),
		MinAge:               kc.ImageMinimumGCAge.Duration,
		MaxAge:               kc.ImageMaximumGCAge.Duration,
		Keep:                 sandboxImage(ctx, rt, log),
	}, clk, reg, log.With("component", "imagegc"))
}

// sandboxImageSource is what sandboxImage asks the runtime.
type sandboxImageSource interface {
	Status(ctx context.Context, in *runtimeapi.StatusRequest, opts ...grpc.CallOption) (*runtimeapi.StatusResponse, error)
	ListImages(ctx context.Context, in *runtimeapi.ListImagesRequest, opts ...grpc.CallOption) (*runtimeapi.ListImagesResponse, error)
}

// sandboxImage is the runtime's sandbox (pause) image, which image GC must keep: containerd
// 1.6 does not mark it pinned, and without it no sandbox starts. It is read from the CRI
// verbose status (containerd 1.6's "config" info has sandboxImage). containerd 2.x names it
// there no more (it moved to the images plugin's pinned_images) and marks it pinned in
// ListImages instead, which image GC honours: then there is nothing to add.
func sandboxImage(ctx context.Context, rt sandboxImageSource, log *slog.Logger) []string {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := rt.Status(cctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		log.Warn("read the runtime's sandbox image; image GC cannot protect it", "err", err)
		return nil
	}
	var cfg struct {
		SandboxImage string `json:"sandboxImage"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["config"]), &cfg); err == nil && cfg.SandboxImage != "" {
		return []string{cfg.SandboxImage}
	}
	images, err := rt.ListImages(cctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		log.Warn("the runtime's status names no sandbox image, and its images cannot be listed; image GC cannot protect it", "err", err)
		return nil
	}
	var pinned []string
	for _, img := range images.GetImages() {
		if img.GetPinned() {
			pinned = append(pinned, img.GetRepoTags()...)
		}
	}
	if len(pinned) == 0 {
		log.Warn("the runtime's status names no sandbox image and it pins no image; image GC cannot protect the sandbox image")
		return nil
	}
	log.Info("the runtime pins its images (image GC keeps them)", "pinned", pinned)
	return nil
}
