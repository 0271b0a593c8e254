package volumes

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/unitlet/unitlet/services/volumes/atomicwriter"
)

// hungPayloads stands for a set-up that never returns (a mount that hangs) until released.
type hungPayloads struct {
	entered chan struct{}
	release chan struct{}
}

func (h hungPayloads) Payload(context.Context, *corev1.Pod, *corev1.Volume) (map[string]atomicwriter.FileProjection, error) {
	h.entered <- struct{}{}
	<-h.release
	return map[string]atomicwriter.FileProjection{"k": {Data: []byte("v"), Mode: 0o644}}, nil
}

func TestAStuckSetUpFailsTheHealthCheck(t *testing.T) {
	hung := hungPayloads{entered: make(chan struct{}), release: make(chan struct{})}
	m, clk := newTestManager(t, hung)
	pod := testPod("uid-hung", []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
	}, nil)
	done := make(chan error, 1)
	go func() { _, err := m.Prepare(context.Background(), pod); done <- err }()
	<-hung.entered

	clk.Step(stuckAfter - time.Second)
	if err := m.Healthy(); err != nil {
		t.Fatalf("a set-up under way for less than %s: %v", stuckAfter, err)
	}
	clk.Step(2 * time.Second)
	err := m.Healthy()
	if err == nil || !strings.Contains(err.Error(), "setting up volume config of pod") {
		t.Fatalf("a set-up under way past %s: %v, want it named", stuckAfter, err)
	}
	close(hung.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := m.Healthy(); err != nil {
		t.Errorf("after the set-up ended: %v", err)
	}
}
