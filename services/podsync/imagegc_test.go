package podsync

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type fakeSandboxImageSource struct {
	config string
	images []*runtimeapi.Image
}

func (f fakeSandboxImageSource) Status(context.Context, *runtimeapi.StatusRequest, ...grpc.CallOption) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Info: map[string]string{"config": f.config}}, nil
}

func (f fakeSandboxImageSource) ListImages(context.Context, *runtimeapi.ListImagesRequest, ...grpc.CallOption) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{Images: f.images}, nil
}

func TestSandboxImage(t *testing.T) {
	// The "config" info of containerd 2.4.2's verbose CRI Status, as the containerd2 stack's
	// containerd answered it: no sandboxImage (it is under the images plugin's pinned_images).
	v2, err := os.ReadFile("testdata/containerd-v2.4.2-status-config.json")
	if err != nil {
		t.Fatal(err)
	}
	pause := &runtimeapi.Image{Id: "sha256:1", RepoTags: []string{"unitlet.local/pause:1"}, Pinned: true}
	busybox := &runtimeapi.Image{Id: "sha256:2", RepoTags: []string{"unitlet.local/busybox:1"}}
	for _, tc := range []struct {
		name     string
		rt       fakeSandboxImageSource
		want     []string
		wantWarn bool
	}{
		{"containerd 1.6 names it", fakeSandboxImageSource{config: `{"sandboxImage":"unitlet.local/pause:1","containerd":{}}`, images: []*runtimeapi.Image{busybox}},
			[]string{"unitlet.local/pause:1"}, false},
		{"containerd 2.x pins it", fakeSandboxImageSource{config: string(v2), images: []*runtimeapi.Image{pause, busybox}}, nil, false},
		{"neither named nor pinned", fakeSandboxImageSource{config: string(v2), images: []*runtimeapi.Image{busybox}}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			got := sandboxImage(context.Background(), tc.rt, slog.New(slog.NewTextHandler(&logs, nil)))
			if !slices.Equal(got, tc.want) {
				t.Errorf("sandboxImage = %v, want %v", got, tc.want)
			}
			if warned := strings.Contains(logs.String(), "level=WARN"); warned != tc.wantWarn {
				t.Errorf("warned %v, want %v:\n%s", warned, tc.wantWarn, logs.String())
			}
		})
	}
}
