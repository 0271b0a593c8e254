package status

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
)

func TestPressureConditionsOutliveARestartButNotAnOutage(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	w := newPressureWatch(nil, clk)
	if _, err := w.Pressure(context.Background()); err == nil {
		t.Fatal("conditions before any arrived: want an error (not monitored)")
	}
	w.take([]*evictionv1.Condition{{Type: "MemoryPressure", Status: "True", Reason: "KubeletHasInsufficientMemory"}})
	select {
	case <-w.wake:
	default:
		t.Fatal("new conditions did not wake the status loop")
	}
	w.take([]*evictionv1.Condition{{Type: "MemoryPressure", Status: "True", Reason: "KubeletHasInsufficientMemory"}})
	select {
	case <-w.wake:
		t.Fatal("the same conditions woke the status loop")
	default:
	}

	w.disconnected()
	clk.Step(pressureHold - time.Second)
	got, err := w.Pressure(context.Background())
	if err != nil || len(got) != 1 || got[0].Status != corev1.ConditionTrue {
		t.Fatalf("within the hold after a disconnect: %v, %v; want the last conditions", got, err)
	}
	clk.Step(2 * time.Second)
	if _, err := w.Pressure(context.Background()); err == nil {
		t.Fatal("after the hold: want an error (not monitored)")
	}
	w.take([]*evictionv1.Condition{{Type: "MemoryPressure", Status: "True"}})
	if _, err := w.Pressure(context.Background()); err != nil {
		t.Fatalf("reconnected: %v", err)
	}
}
