package relist

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

type fakeRuntime struct {
	mu         sync.Mutex
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	statusCall int
}

func labels(uid, name, container string) map[string]string {
	l := map[string]string{"io.kubernetes.pod.uid": uid, "io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "default"}
	if container != "" {
		l["io.kubernetes.container.name"] = container
	}
	return l
}

func matches(sel, l map[string]string) bool {
	for k, v := range sel {
		if l[k] != v {
			return false
		}
	}
	return true
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, in *runtimeapi.ListPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.PodSandbox
	for _, s := range f.sandboxes {
		if matches(in.GetFilter().GetLabelSelector(), s.Labels) {
			out = append(out, s)
		}
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

func (f *fakeRuntime) PodSandboxStatus(_ context.Context, in *runtimeapi.PodSandboxStatusRequest, _ ...grpc.CallOption) (*runtimeapi.PodSandboxStatusResponse, error) {
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: in.PodSandboxId, Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.0.0." + in.PodSandboxId}}}, nil
}

func (f *fakeRuntime) ListContainers(_ context.Context, in *runtimeapi.ListContainersRequest, _ ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.Container
	for _, c := range f.containers {
		if matches(in.GetFilter().GetLabelSelector(), c.Labels) {
			out = append(out, c)
		}
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, in *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statusCall++
	for _, c := range f.containers {
		if c.Id == in.ContainerId {
			return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: c.Id, State: c.State, StartedAt: c.CreatedAt + 1, ExitCode: 3}}, nil
		}
	}
	return nil, context.Canceled
}

func TestRelistGroupsDetectsChangesAndCaches(t *testing.T) {
	rt := &fakeRuntime{
		sandboxes: []*runtimeapi.PodSandbox{
			{Id: "1", Labels: labels("a", "pa", ""), State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: 10, Metadata: &runtimeapi.PodSandboxMetadata{Attempt: 0}},
			{Id: "2", Labels: labels("b", "pb", ""), State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: 20},
			{Id: "3", Labels: map[string]string{"other": "x"}, State: runtimeapi.PodSandboxState_SANDBOX_READY},
		},
		containers: []*runtimeapi.Container{
			{Id: "a-old", PodSandboxId: "1", Labels: labels("a", "pa", "main"), State: runtimeapi.ContainerState_CONTAINER_EXITED, CreatedAt: 100, Metadata: &runtimeapi.ContainerMetadata{Name: "main", Attempt: 0}},
			{Id: "a-new", PodSandboxId: "1", Labels: labels("a", "pa", "main"), State: runtimeapi.ContainerState_CONTAINER_RUNNING, CreatedAt: 200, Metadata: &runtimeapi.ContainerMetadata{Name: "main", Attempt: 1}},
			{Id: "b-1", PodSandboxId: "2", Labels: labels("b", "pb", "main"), State: runtimeapi.ContainerState_CONTAINER_RUNNING, CreatedAt: 100},
		},
	}
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	var changed [][]types.UID
	r := New(rt, time.Second, clk, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), func(uids []types.UID) { changed = append(changed, uids) })
	ctx := context.Background()
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	if len(changed) != 1 || !slices.Equal(changed[0], []types.UID{"a", "b"}) {
		t.Fatalf("first relist reported %v, want [a b]", changed)
	}
	pods := r.Pods()
	if len(pods) != 2 {
		t.Fatalf("%d pods, want 2 (a sandbox without the kubelet's labels is not a pod)", len(pods))
	}
	a := r.Pod("a")
	if a.Name != "pa" || a.Latest("main").ID != "a-new" || len(a.Instances("main")) != 2 || a.ReadySandbox().IPs[0] != "10.0.0.1" {
		t.Errorf("pod a: %+v, want newest instance a-new of 2 and the sandbox IP", a)
	}
	calls := rt.statusCall

	// Nothing changed: no report, no new status calls.
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	if len(changed) != 1 || rt.statusCall != calls {
		t.Errorf("an unchanged runtime: reports %v, %d new status calls; want none", changed[1:], rt.statusCall-calls)
	}

	// b's container exits: only b is reported, and only its container is asked again.
	rt.mu.Lock()
	rt.containers[2].State = runtimeapi.ContainerState_CONTAINER_EXITED
	rt.mu.Unlock()
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	if len(changed) != 2 || !slices.Equal(changed[1], []types.UID{"b"}) || rt.statusCall != calls+1 {
		t.Errorf("after b's container exited: reports %v, %d status calls; want [b] and 1", changed, rt.statusCall-calls)
	}
	if c := r.Pod("b").Latest("main"); c.Running() || c.ExitCode != 3 {
		t.Errorf("b's container: %+v, want exited with code 3", c)
	}

	// a disappears: reported, gone from the view.
	rt.mu.Lock()
	rt.sandboxes = rt.sandboxes[1:]
	rt.containers = rt.containers[2:]
	rt.mu.Unlock()
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(changed[len(changed)-1], []types.UID{"a"}) || r.Pod("a") != nil {
		t.Errorf("after a was removed: reports %v, pod %v", changed, r.Pod("a"))
	}

	// Inspect reads one pod afresh.
	p, err := r.Inspect(ctx, "b")
	if err != nil || p == nil || len(p.Containers) != 1 || p.Containers[0].ID != "b-1" {
		t.Errorf("Inspect(b) = %+v, %v", p, err)
	}
}

func TestRelistHealth(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	r := New(&fakeRuntime{}, time.Second, clk, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if ok, _, _ := r.Health(); !ok {
		t.Errorf("unhealthy right after the start")
	}
	clk.Step(HealthyThreshold + time.Second)
	if ok, _, err := r.Health(); ok || err == nil {
		t.Errorf("healthy %v (%v) with no relist for more than %s", ok, err, HealthyThreshold)
	}
	if err := r.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := r.Health(); !ok || !r.Synced() {
		t.Errorf("unhealthy after a relist")
	}
}
