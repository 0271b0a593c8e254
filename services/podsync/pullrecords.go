package podsync

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/services/podsync/pullrecords"
	"github.com/unitlet/unitlet/shared/cri"
)

// gateEnsureSecretPulledImages is the kubelet's feature gate for verifying the credentials
// of pods that use images already on the node; beta, on by default.
const gateEnsureSecretPulledImages = "KubeletEnsureSecretPulledImages"

// openPullRecords opens the image pull records under <root-dir>/image_manager, as the
// kubelet keeps them, and settles the pulls a crash interrupted; nil when the feature gate
// is off.
func openPullRecords(ctx context.Context, kc *kubeletv1beta1.KubeletConfiguration, rootDir string, rt *cri.Client, reg prometheus.Registerer, log *slog.Logger) (*pullrecords.Records, error) {
	if on, set := kc.FeatureGates[gateEnsureSecretPulledImages]; set && !on {
		log.Info("images on the node are used without verifying pods' credentials (feature gate " + gateEnsureSecretPulledImages + " off)")
		return nil, nil
	}
	policy, err := pullrecords.NewPolicy(kc.ImagePullCredentialsVerificationPolicy, kc.PreloadedImagesVerificationAllowlist)
	if err != nil {
		return nil, err
	}
	records, err := pullrecords.Open(filepath.Join(rootDir, "image_manager"), policy, reg, log)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	images, err := rt.ListImages(lctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		log.Warn("list images: pull intents left by a crash stay until the next start", "err", err)
		return records, nil
	}
	records.Recover(images.GetImages())
	return records, nil
}

// prunePullRecords drops, every pruneEvery, the pull records of images the runtime no
// longer has, as the kubelet does after its image garbage collection. Without records
// (the feature gate off) the loop only waits for ctx to end.
func prunePullRecords(records *pullrecords.Records, rt *cri.Client, clk clock.WithTicker, log *slog.Logger) func(context.Context) error {
	const pruneEvery = 5 * time.Minute
	if records == nil {
		return untilDone
	}
	return func(ctx context.Context) error {
		t := clk.NewTicker(pruneEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C():
			}
			until := clk.Now()
			images, err := rt.ListImages(ctx, &runtimeapi.ListImagesRequest{})
			if err != nil {
				log.Warn("list images to prune image pull records", "err", err)
				continue
			}
			var ids []string
			for _, img := range images.GetImages() {
				ids = append(ids, img.GetId())
			}
			records.Prune(ids, until)
		}
	}
}
