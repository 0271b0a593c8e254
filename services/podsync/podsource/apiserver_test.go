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

	"github.com/unitlet/unitlet/shared/kubeapi/adapt"
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
		if err := WatchAPI(ctx, adapt.Clientset(client), testNode, sinks.desired, sinks.mirrors, discardLogger()); err != nil {
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

// A pod whose resourceVersion has not changed is sent again as the same object, with its
// annotations as first sent; a changed pod is a new copy; the informer's object is never
// changed.
func TestPublishCopiesOnlyChangedPods(t *testing.T) {
	sinks := splitSink{desired: newRecordingSink(), mirrors: newRecordingSink()}
	a := &apiSets{sink: sinks.desired, mirrors: sinks.mirrors, seen: map[types.UID]string{}, copies: map[types.UID]*corev1.Pod{}}
	web, db, mirror := apiPod("web", false), apiPod("db", false), apiPod("etcd-node-1", true)
	web.ResourceVersion, db.ResourceVersion, mirror.ResourceVersion = "1", "2", "3"
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a.publish([]any{web, db, mirror}, t0)

	db2 := db.DeepCopy()
	db2.ResourceVersion, db2.Labels = "4", map[string]string{"changed": "yes"}
	a.publish([]any{web, db2, mirror}, t0.Add(time.Minute))

	sets := sinks.desired.sets
	byName := func(set []*corev1.Pod, name string) *corev1.Pod {
		for _, p := range set {
			if p.Name == name {
				return p
			}
		}
		t.Fatalf("no pod %s in %v", name, podNames(set))
		return nil
	}
	if byName(sets[0], "web") != byName(sets[1], "web") {
		t.Error("unchanged pod web was copied again")
	}
	if byName(sets[1], "web") == web || web.Annotations != nil {
		t.Error("the informer's pod web was sent or changed")
	}
	got := byName(sets[1], "db")
	if got == byName(sets[0], "db") || got.Labels["changed"] != "yes" {
		t.Errorf("changed pod db not sent as a new copy: labels %v", got.Labels)
	}
	if seen := got.Annotations[AnnotationConfigSeen]; seen != t0.Format(time.RFC3339Nano) {
		t.Errorf("db config.seen = %q after its change, want the first sight %s", seen, t0.Format(time.RFC3339Nano))
	}
	if m := sinks.mirrors.sets; m[0][0] != m[1][0] {
		t.Error("unchanged mirror pod was copied again")
	}
}
