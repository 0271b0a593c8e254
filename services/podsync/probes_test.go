package podsync

import (
	"context"
	"reflect"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/unitlet/unitlet/services/podsync/podworker"
	"github.com/unitlet/unitlet/services/podsync/prober"
)

type recordedWorkers struct {
	mu       sync.Mutex
	restarts []string
	triggers []types.UID
	done     chan struct{}
}

func (w *recordedWorkers) RestartContainer(uid types.UID, name, containerID string, reason podworker.KillReason) {
	w.mu.Lock()
	w.restarts = append(w.restarts, string(uid)+"/"+name+"/"+containerID+"/"+string(reason))
	w.mu.Unlock()
	w.done <- struct{}{}
}

func (w *recordedWorkers) Trigger(uids ...types.UID) {
	w.mu.Lock()
	w.triggers = append(w.triggers, uids...)
	w.mu.Unlock()
	w.done <- struct{}{}
}

func TestProbeResultsRestartOnLivenessAndStartupFailuresOnly(t *testing.T) {
	results := make(chan prober.Result)
	w := &recordedWorkers{done: make(chan struct{}, 8)}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- applyProbeResults(ctx, results, w) }()
	for _, r := range []prober.Result{
		{PodUID: "a", ContainerName: "c", ContainerID: "id1", Kind: prober.Liveness, Success: false},
		{PodUID: "b", ContainerName: "c", ContainerID: "id2", Kind: prober.Startup, Success: false},
		{PodUID: "c", ContainerName: "c", ContainerID: "id3", Kind: prober.Readiness, Success: false},
		{PodUID: "d", ContainerName: "c", ContainerID: "id4", Kind: prober.Liveness, Success: true},
	} {
		results <- r
		<-w.done
	}
	cancel()
	if err := <-stopped; err != nil {
		t.Fatalf("stopped with %v", err)
	}
	wantRestarts := []string{
		"a/c/id1/LivenessProbe",
		"b/c/id2/StartupProbe",
	}
	if !reflect.DeepEqual(w.restarts, wantRestarts) {
		t.Errorf("restarts %q, want %q", w.restarts, wantRestarts)
	}
	if want := []types.UID{"c", "d"}; !reflect.DeepEqual(w.triggers, want) {
		t.Errorf("triggers %v, want %v", w.triggers, want)
	}
}
