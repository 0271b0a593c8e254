package podsync

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/unitlet/unitlet/shared/kubeapi/adapt"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func localTestNode() *corev1.Node {
	n, _ := testNode()
	n.Labels = map[string]string{"local": "yes"}
	return n
}

// runNodeView starts v until the test ends and waits for its sync.
func runNodeView(t *testing.T, v *nodeView) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = v.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	v.WaitSynced(ctx, "test", 10*time.Second)
	if v.synced != nil && !v.synced() {
		t.Fatal("the Node informer did not sync")
	}
}

func TestNodeViewStandaloneIsLocal(t *testing.T) {
	v := newNodeView(localTestNode(), nil, quietLog())
	runNodeView(t, v)
	n, view := v.Get()
	if view != viewLocal || n.Labels["local"] != "yes" {
		t.Errorf("standalone: view %q labels %v, want the local node", view, n.Labels)
	}
}

func TestNodeViewFollowsTheAPIsNode(t *testing.T) {
	client := fake.NewClientset()
	v := newNodeView(localTestNode(), adapt.Clientset(client), quietLog())
	runNodeView(t, v)
	if n, view := v.Get(); view != viewLocal || n.Labels["local"] != "yes" {
		t.Fatalf("before registration: view %q labels %v, want the local node", view, n.Labels)
	}

	ctx := context.Background()
	api := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Labels: map[string]string{"zone": "a"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoExecute}}}}
	if _, err := client.CoreV1().Nodes().Create(ctx, api, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitView(t, v, "the registered Node", func(n *corev1.Node, view string) bool {
		return view == viewAPI && n.Labels["zone"] == "a" && len(n.Spec.Taints) == 1
	})

	if err := client.CoreV1().Nodes().Delete(ctx, "node1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitView(t, v, "the local node once the Node is deleted", func(n *corev1.Node, view string) bool {
		return view == viewLocal && n.Labels["local"] == "yes"
	})
}

func waitView(t *testing.T, v *nodeView, what string, ok func(*corev1.Node, string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, view := v.Get()
		if ok(n, view) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("want %s, have view %q: %+v", what, view, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A source waits for the Node informer: with a bound it goes on when it has not synced.
func TestNodeViewWaitSyncedBound(t *testing.T) {
	v := newNodeView(localTestNode(), adapt.Clientset(fake.NewClientset()), quietLog()) // never started
	start := time.Now()
	v.WaitSynced(context.Background(), "test", 50*time.Millisecond)
	if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
		t.Errorf("WaitSynced returned after %s, want after its 50ms bound", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	v.WaitSynced(ctx, "test", 0) // no bound: returns when ctx ends
	if n, view := v.Get(); view != viewLocal || n.Labels["local"] != "yes" {
		t.Errorf("unsynced: view %q, want the local node", view)
	}
}
