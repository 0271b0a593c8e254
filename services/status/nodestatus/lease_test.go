package nodestatus

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

func (h *harness) lease() *coordinationv1.Lease {
	l, err := h.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), testNode, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return l
}

func TestLeaseCreatedOwnedByTheNodeAndRenewed(t *testing.T) {
	h := newHarness(t, nil)
	if h.c.renewInterval != 10*time.Second {
		t.Errorf("renew interval = %v, want 10s (a quarter of 40s)", h.c.renewInterval)
	}
	h.c.renewInterval = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.c.RunLease(ctx) }()

	// No Node yet: the lease waits for it, as the kubelet's.
	time.Sleep(100 * time.Millisecond)
	if l := h.lease(); l != nil {
		t.Fatalf("lease created before the node exists: %+v", l)
	}

	node, err := h.c.tryRegister(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.c.setRegistered(node, nil)
	waitFor(t, "the lease", func() bool { return h.lease() != nil })
	l := h.lease()
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != testNode {
		t.Errorf("holder = %v, want %s", l.Spec.HolderIdentity, testNode)
	}
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 40 {
		t.Errorf("duration = %v, want 40", l.Spec.LeaseDurationSeconds)
	}
	want := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: testNode, UID: "uid-" + testNode}
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0] != want {
		t.Errorf("owner references = %+v, want %+v", l.OwnerReferences, want)
	}
	if !l.Spec.RenewTime.Time.Equal(t0) {
		t.Errorf("renew time = %v, want the clock's %v", l.Spec.RenewTime, t0)
	}

	h.clock.Step(10 * time.Second)
	waitFor(t, "a renewal", func() bool {
		l := h.lease()
		return l != nil && l.Spec.RenewTime.Time.Equal(t0.Add(10*time.Second))
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunLease = %v, want nil on cancel", err)
	}
	if got := counter(t, h.registry, "unitlet_status_lease_renewals_total", "result", "success"); got < 2 {
		t.Errorf("lease renewals = %v, want at least 2", got)
	}
	if st := h.c.Status(); st.GetLastLeaseRenew() == nil {
		t.Errorf("Status() has no lease renewal: %v", st)
	}
}

// TestLeaseRenewTimeNeverGoesBack: the node's wall clock steps back two minutes (the fake
// clock is set back). The node lifecycle controller only counts a renewal whose renewTime
// is after the last it saw, so every renewal must still be after the one before; once the
// clock has caught up, renewTime follows it again.
func TestLeaseRenewTimeNeverGoesBack(t *testing.T) {
	h := newHarness(t, nil)
	h.c.renewInterval = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.c.RunLease(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	node, err := h.c.tryRegister(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.c.setRegistered(node, nil)
	waitFor(t, "the lease", func() bool { return h.lease() != nil })

	h.clock.SetTime(t0.Add(-2 * time.Minute))
	// Each renewal the API has (the lease as stored changes) is after the one before.
	// Waiting on the renewal counter instead raced with the reads of the stored lease.
	last := h.lease().Spec.RenewTime.Time
	for range 5 {
		var got time.Time
		waitFor(t, "a renewal", func() bool {
			got = h.lease().Spec.RenewTime.Time
			return !got.Equal(last)
		})
		if !got.After(last) || got.After(t0.Add(time.Second)) {
			t.Fatalf("renewTime %s after %s with the clock 2 minutes behind: want a little after the last", got.Format(time.RFC3339Nano), last.Format(time.RFC3339Nano))
		}
		last = got
	}

	h.clock.SetTime(t0.Add(10 * time.Second))
	waitFor(t, "a renewal at the clock's time", func() bool {
		l := h.lease()
		return l != nil && l.Spec.RenewTime.Time.Equal(t0.Add(10*time.Second))
	})
}

func TestLeaseDurationFromConfig(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.Config = &kubeletconfigv1beta1.KubeletConfiguration{NodeLeaseDurationSeconds: 60}
	})
	if h.c.leaseDuration != 60 || h.c.renewInterval != 15*time.Second {
		t.Errorf("lease %ds renewed every %v, want 60s every 15s", h.c.leaseDuration, h.c.renewInterval)
	}
}

// TestHeartbeatClientClosesItsConnections checks that the heartbeat client has a timeout,
// no rate limit, and a dialer whose CloseAll drops its open connections.
func TestHeartbeatClientClosesItsConnections(t *testing.T) {
	var closed atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-a","uid":"u1"}}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	h := newHarness(t, func(o *Options) {
		o.RESTConfig = &rest.Config{Host: srv.URL, QPS: 5, Burst: 10}
	})
	if h.c.onHeartbeatFailure == nil {
		t.Fatal("no heartbeat failure action with a REST config")
	}
	if h.c.heartbeat == h.client {
		t.Fatal("the heartbeat client is the rate-limited client")
	}
	for range 20 {
		// More requests than the original config's burst allows at once.
		if _, err := h.c.heartbeat.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{}); err != nil {
			t.Fatalf("get through the heartbeat client: %v", err)
		}
	}
	if closed.Load() != 0 {
		t.Fatalf("connections closed before the failure action: %d", closed.Load())
	}
	h.c.onHeartbeatFailure()
	waitFor(t, "the server to see the connection closed", func() bool { return closed.Load() > 0 })
}
