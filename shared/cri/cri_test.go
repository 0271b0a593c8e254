package cri

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestCallTimeoutIsTheKubelets(t *testing.T) {
	const d = 2 * time.Minute
	for _, c := range []struct {
		req  any
		want time.Duration
	}{
		{&runtimeapi.ListContainersRequest{}, d},
		{&runtimeapi.PullImageRequest{}, 0},
		{&runtimeapi.RunPodSandboxRequest{}, 2 * d},
		{&runtimeapi.StopContainerRequest{Timeout: 30}, d + 30*time.Second},
		{&runtimeapi.ExecSyncRequest{Timeout: 5}, d + 5*time.Second},
		{&runtimeapi.ExecSyncRequest{}, 0},
	} {
		if got := callTimeout(c.req, d); got != c.want {
			t.Errorf("%T: %s, want %s", c.req, got, c.want)
		}
	}
}

// slowRuntime answers ListContainers only when the caller gives up, and serves images
// on a socket of its own.
type slowRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (slowRuntime) ListContainers(ctx context.Context, _ *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

type images struct {
	runtimeapi.UnimplementedImageServiceServer
	name string
}

func (i images) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{{Id: i.name}}}, nil
}

func serve(t *testing.T, path string, register func(*grpc.Server)) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go s.Serve(l)
	t.Cleanup(s.Stop)
}

func TestDialAppliesTheRequestTimeoutAndTheImageEndpoint(t *testing.T) {
	dir := t.TempDir()
	rt, img := filepath.Join(dir, "runtime.sock"), filepath.Join(dir, "image.sock")
	serve(t, rt, func(s *grpc.Server) {
		runtimeapi.RegisterRuntimeServiceServer(s, slowRuntime{})
		runtimeapi.RegisterImageServiceServer(s, images{name: "from-the-runtime"})
	})
	serve(t, img, func(s *grpc.Server) { runtimeapi.RegisterImageServiceServer(s, images{name: "from-the-image-service"}) })

	c, err := Dial("unix://"+rt, RequestTimeout(200*time.Millisecond), ImageEndpoint("unix://"+img))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{})
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) > 5*time.Second {
		t.Errorf("ListContainers on a runtime that never answers: %v after %s, want DeadlineExceeded after 200ms", err, time.Since(start))
	}
	resp, err := c.ListImages(context.Background(), &runtimeapi.ListImagesRequest{})
	if err != nil || len(resp.Images) != 1 || resp.Images[0].Id != "from-the-image-service" {
		t.Errorf("ListImages: %v %v, want the image endpoint's answer", resp, err)
	}

	if _, err := Dial("unix://"+rt, ImageEndpoint("relative.sock")); err == nil {
		t.Error("a relative image endpoint: no error")
	}
}
