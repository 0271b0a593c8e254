package podsync

import (
	"context"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/unitlet/unitlet/shared/kubeapi/adapt"
)

func TestRuntimeClassesResolveHandlers(t *testing.T) {
	client := fake.NewClientset(&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"})
	r := newRuntimeClasses(adapt.Clientset(client))
	if _, err := r.Handler("gvisor"); err == nil || err.Error() != "RuntimeClass gvisor: RuntimeClasses have not yet been read from the API server" {
		t.Errorf("before the first list: %v, want it to say the classes are not read yet", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for !r.synced() {
		if time.Now().After(deadline) {
			t.Fatal("the RuntimeClass informer never synced")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if h, err := r.Handler("gvisor"); err != nil || h != "runsc" {
		t.Errorf("Handler(gvisor) = %q, %v; want runsc", h, err)
	}
	if _, err := r.Handler("kata"); err == nil || err.Error() != `runtimeclass.node.k8s.io "kata" not found` {
		t.Errorf("Handler(kata) error %v, want the API's not found", err)
	}
}

// With an API server the workers resolve classes through the cache.
func TestRuntimeClassesForWorkersWithAClient(t *testing.T) {
	r := newRuntimeClasses(adapt.Clientset(fake.NewClientset()))
	if r.forWorkers() == nil {
		t.Error("with a client: the workers get no RuntimeClasses")
	}
	if newServiceLister(adapt.Clientset(fake.NewClientset())).forWorkers() == nil {
		t.Error("with a client: the workers get no services")
	}
}
