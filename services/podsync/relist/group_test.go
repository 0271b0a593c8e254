package relist

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestRelistGroupsDetectsChangesAndCaches(t *testing.T) {
	rt := newMemRuntime()
	rt.sandboxes = []*runtimeapi.PodSandbox{
		sandbox("1", "a", 10, 0, true),
		sandbox("2", "b", 20, 0, true),
		{Id: "3", Labels: map[string]string{"other": "x"}, State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}
	rt.containers = []*runtimeapi.Container{
		container("a-old", "a", "1", "main", 100, 0, runtimeapi.ContainerState_CONTAINER_EXITED),
		container("a-new", "a", "1", "main", 200, 1, runtimeapi.ContainerState_CONTAINER_RUNNING),
		container("b-1", "b", "2", "main", 100, 0, runtimeapi.ContainerState_CONTAINER_RUNNING),
	}
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	var changed [][]types.UID
	r := New(rt, time.Second, clk, nil, quietLog(), func(uids []types.UID) { changed = append(changed, uids) })
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
	if a.Name != "pod-a" || a.Latest("main").ID != "a-new" || len(a.Instances("main")) != 2 || a.ReadySandbox().IPs[0] != "10.1.0.1" {
		t.Errorf("pod a: %+v, want newest instance a-new of 2 and the sandbox IP", a)
	}
	calls := total(rt.statusCalls())

	// Nothing changed: no report, no new status calls.
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	if len(changed) != 1 || total(rt.statusCalls()) != calls {
		t.Errorf("an unchanged runtime: reports %v, %d new status calls; want none", changed[1:], total(rt.statusCalls())-calls)
	}

	// b's container exits: only b is reported, and only its container is asked again.
	rt.setState("b-1", runtimeapi.ContainerState_CONTAINER_EXITED)
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	if len(changed) != 2 || !slices.Equal(changed[1], []types.UID{"b"}) || total(rt.statusCalls()) != calls+1 {
		t.Errorf("after b's container exited: reports %v, %d status calls; want [b] and 1", changed, total(rt.statusCalls())-calls)
	}
	if c := r.Pod("b").Latest("main"); c.Running() || c.ExitCode != 7 {
		t.Errorf("b's container: %+v, want exited with the runtime's code 7", c)
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
	r := New(newMemRuntime(), time.Second, clk, nil, quietLog(), nil)
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

func total(calls map[string]int) int {
	n := 0
	for _, c := range calls {
		n += c
	}
	return n
}
