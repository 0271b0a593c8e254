package cri

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestOperationTypesAreTheKubelets(t *testing.T) {
	for method, want := range map[string]string{
		"/runtime.v1.RuntimeService/RunPodSandbox":      "run_podsandbox",
		"/runtime.v1.RuntimeService/PodSandboxStatus":   "podsandbox_status",
		"/runtime.v1.RuntimeService/CreateContainer":    "create_container",
		"/runtime.v1.RuntimeService/ListContainerStats": "list_container_stats",
		"/runtime.v1.RuntimeService/ReopenContainerLog": "reopen_container_log",
		"/runtime.v1.RuntimeService/GetContainerEvents": "get_container_events",
		"/runtime.v1.RuntimeService/Status":             "status",
		"/runtime.v1.ImageService/PullImage":            "pull_image",
		"/runtime.v1.ImageService/ImageFsInfo":          "image_fs_info",
	} {
		if got := operationType(method); got != want {
			t.Errorf("operationType(%s) = %q, want the kubelet's %q", method, got, want)
		}
	}
}

func TestMetricsCountAndTimeEveryCall(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "runtime.sock")
	serve(t, sock, func(s *grpc.Server) {
		runtimeapi.RegisterRuntimeServiceServer(s, slowRuntime{})
		runtimeapi.RegisterImageServiceServer(s, images{name: "busybox"})
	})
	reg := prometheus.NewRegistry()
	c, err := Dial("unix://"+sock, RequestTimeout(100*time.Millisecond), Metrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		if _, err := c.ListImages(context.Background(), &runtimeapi.ListImagesRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{}); err == nil {
		t.Fatal("ListContainers on a runtime that never answers: no error")
	}
	want := `
# HELP kubelet_runtime_operations_errors_total Cumulative number of runtime operation errors by operation type.
# TYPE kubelet_runtime_operations_errors_total counter
kubelet_runtime_operations_errors_total{operation_type="list_containers"} 1
# HELP kubelet_runtime_operations_total Cumulative number of runtime operations by operation type.
# TYPE kubelet_runtime_operations_total counter
kubelet_runtime_operations_total{operation_type="list_containers"} 1
kubelet_runtime_operations_total{operation_type="list_images"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubelet_runtime_operations_total", "kubelet_runtime_operations_errors_total"); err != nil {
		t.Error(err)
	}
	// The timed-out call is timed as it took: at least the request timeout.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var timed int
	for _, mf := range mfs {
		if mf.GetName() != "kubelet_runtime_operations_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			timed++
			if op := m.GetLabel()[0].GetValue(); op == "list_containers" && m.GetHistogram().GetSampleSum() < 0.1 {
				t.Errorf("list_containers took %.3f s by the histogram, want at least the 100ms timeout", m.GetHistogram().GetSampleSum())
			}
		}
	}
	if timed != 2 {
		t.Errorf("%d duration series, want 2 (list_images, list_containers)", timed)
	}
}
