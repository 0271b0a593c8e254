package podsource

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

func apiPod(name string, mirror bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: testNode, Containers: []corev1.Container{{Name: "c", Image: "i"}}},
	}
	if mirror {
		p.Annotations = map[string]string{AnnotationConfigMirror: "hash-" + name}
	}
	return p
}

// splitSink records desired and mirror sets apart.
type splitSink struct {
	desired, mirrors *recordingSink
}

func TestWatchAPI(t *testing.T) {
	client := fake.NewClientset(apiPod("web", false), apiPod("etcd-node-1", true))
	sinks := splitSink{desired: newRecordingSink(), mirrors: newRecordingSink()}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := WatchAPI(ctx, client, testNode, sinks.desired, sinks.mirrors, discardLogger()); err != nil {
			t.Errorf("WatchAPI: %v", err)
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	// The first set is already complete: nothing is sent before the informer has synced.
	sinks.desired.waitFor(t, 5*time.Second, "first desired set", func([]*corev1.Pod) bool { return true })
	sinks.desired.mu.Lock()
	first, src := sinks.desired.sets[0], sinks.desired.srcs[0]
	sinks.desired.mu.Unlock()
	if src != SourceAPI || !namesAre("default/web")(first) {
		t.Fatalf("first set from %q: %v, want api: [default/web]", src, podNames(first))
	}
	if got := first[0].Annotations[AnnotationConfigSource]; got != SourceAPI {
		t.Errorf("config.source = %q, want api", got)
	}
	seen := first[0].Annotations[AnnotationConfigSeen]
	if _, err := time.Parse(time.RFC3339Nano, seen); err != nil {
		t.Errorf("config.seen = %q: %v", seen, err)
	}
	sinks.mirrors.waitFor(t, time.Second, "mirror set", namesAre("default/etcd-node-1"))

	// The list and watch ask for this node's pods only.
	var selectors []string
	for _, a := range client.Actions() {
		if l, ok := a.(clienttesting.ListAction); ok && a.GetResource().Resource == "pods" {
			selectors = append(selectors, l.GetListRestrictions().Fields.String())
		}
	}
	if len(selectors) == 0 || selectors[0] != "spec.nodeName="+testNode {
		t.Errorf("pod list field selectors = %q, want spec.nodeName=%s", selectors, testNode)
	}

	// Changes arrive as complete sets; mirror pods never reach the desired sink.
	pods := client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, apiPod("db", false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, apiPod("proxy-node-1", true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := sinks.desired.waitFor(t, 5*time.Second, "db added", namesAre("default/db", "default/web"))
	for _, p := range got {
		if p.Name == "web" && p.Annotations[AnnotationConfigSeen] != seen {
			t.Errorf("web's config.seen changed from %s to %s", seen, p.Annotations[AnnotationConfigSeen])
		}
	}
	sinks.mirrors.waitFor(t, 5*time.Second, "mirror added", namesAre("default/etcd-node-1", "default/proxy-node-1"))

	if err := pods.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "etcd-node-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sinks.desired.waitFor(t, 5*time.Second, "web deleted", namesAre("default/db"))
	sinks.mirrors.waitFor(t, 5*time.Second, "mirror deleted", namesAre("default/proxy-node-1"))
}
