package status

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/services/status/nodestatus"
	"github.com/unitlet/unitlet/shared/bus"
)

// optionalServices are unitlet services a node may run besides config, podsync and status:
// each is checked when its bus socket exists (its socket unit is installed, or it listens).
var optionalServices = []string{"certs", "volumes", "eviction"}

// checkServices reports the first unitlet service that does not answer its health check:
// unitlet-config always, the optional ones when their socket exists. podsync is checked
// through its runtime health.
func checkServices(socketDir string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var down serviceErrors
		for _, svc := range append([]string{"config"}, presentOptionalServices(socketDir)...) {
			if err := healthy(ctx, socketDir, svc, healthTimeout); err != nil {
				down = append(down, err)
			}
		}
		if len(down) > 0 {
			return down
		}
		return nil
	}
}

// serviceErrors are the failed checks of one round, said in one message. The round only
// waited (nodestatus.ErrNoAnswerYet) when every one of them did.
type serviceErrors []error

func (e serviceErrors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e serviceErrors) Is(target error) bool {
	if target != nodestatus.ErrNoAnswerYet {
		return false
	}
	for _, err := range e {
		if !errors.Is(err, nodestatus.ErrNoAnswerYet) {
			return false
		}
	}
	return true
}

// presentOptionalServices are the optional services whose bus socket exists.
func presentOptionalServices(socketDir string) []string {
	var present []string
	for _, svc := range optionalServices {
		if _, err := os.Stat(bus.SocketPath(socketDir, svc)); err == nil {
			present = append(present, svc)
		}
	}
	return present
}

// imageLister reads the runtime's images for node.status.images.
type imageLister struct {
	rt runtimeapi.ImageServiceClient
}

// Images are the runtime's images, each with its tags and digests as names.
func (l imageLister) Images(ctx context.Context) ([]corev1.ContainerImage, error) {
	resp, err := l.rt.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list the runtime's images: %w", err)
	}
	out := make([]corev1.ContainerImage, 0, len(resp.GetImages()))
	for _, img := range resp.GetImages() {
		names := append(append([]string{}, img.GetRepoDigests()...), img.GetRepoTags()...)
		if len(names) == 0 {
			continue
		}
		out = append(out, corev1.ContainerImage{Names: names, SizeBytes: int64(img.GetSize())})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].SizeBytes > out[j].SizeBytes })
	return out, nil
}
