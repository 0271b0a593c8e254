package volumes

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/unitlet/unitlet/shared/kubeapi/adapt"
)

// Pods started together read their namespace's kube-root-ca.crt at once: overlapping reads
// of one object share one GET, each caller gets its own copy, and a read after that GET
// asks the API server again.
func TestOverlappingReadsOfAnObjectShareOneGet(t *testing.T) {
	client := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kube-root-ca.crt"},
		Data:       map[string]string{"ca.crt": "PEM"},
	})
	var gets atomic.Int32
	entered, release := make(chan struct{}, 100), make(chan struct{})
	client.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		entered <- struct{}{}
		<-release
		return false, nil, nil // on to the tracker
	})
	o := &objects{client: adapt.Clientset(client)}

	var wg sync.WaitGroup
	got := make([]*corev1.ConfigMap, 10)
	read := func(i int) {
		defer wg.Done()
		cm, err := o.ConfigMap(context.Background(), "default", "kube-root-ca.crt")
		if err != nil {
			t.Error(err)
			return
		}
		got[i] = cm
	}
	wg.Add(1)
	go read(0)
	<-entered // the first GET is in flight
	for i := 1; i < len(got); i++ {
		wg.Add(1)
		go read(i)
	}
	time.Sleep(100 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := gets.Load(); n != 1 {
		t.Errorf("%d GETs for 10 overlapping reads, want 1", n)
	}
	for i, cm := range got {
		if cm == nil || cm.Data["ca.crt"] != "PEM" {
			t.Fatalf("read %d: %v", i, cm)
		}
	}
	got[0].Data["ca.crt"] = "changed by one caller"
	if got[1].Data["ca.crt"] != "PEM" {
		t.Error("callers share one object: a change by one reaches the others")
	}

	if _, err := o.ConfigMap(context.Background(), "default", "kube-root-ca.crt"); err != nil {
		t.Fatal(err)
	}
	if n := gets.Load(); n != 2 {
		t.Errorf("%d GETs after a later read, want 2: only overlapping reads share", n)
	}
}
