package mirrorpod

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/unitlet/unitlet/services/podsync/podsource"
	"github.com/unitlet/unitlet/shared/kubeapi/adapt"
)

const (
	nodeName = "node-1"
	nodeUID  = types.UID("node-uid-1")
)

func node() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: nodeUID}}
}

func staticPod(name, hash string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "kube-system", UID: types.UID(hash),
			Labels: map[string]string{"tier": "control-plane"},
			Annotations: map[string]string{
				podsource.AnnotationConfigHash:   hash,
				podsource.AnnotationConfigSource: podsource.SourceFile,
			},
		},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "i:" + hash}}},
	}
}

func mirrorPod(name, hash string, uid types.UID) *corev1.Pod {
	p := staticPod(name, hash)
	p.UID = uid
	p.Annotations[podsource.AnnotationConfigMirror] = hash
	return p
}

func newManager(objs ...runtime.Object) (*Manager, *fake.Clientset) {
	client := fake.NewClientset(objs...)
	return NewManager(adapt.Clientset(client), nodeName, slog.New(slog.NewTextHandler(io.Discard, nil))), client
}

// podActions lists the create and delete calls on pods as "verb name".
func podActions(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		if a.GetResource().Resource != "pods" {
			continue
		}
		switch a := a.(type) {
		case clienttesting.CreateAction:
			out = append(out, "create "+a.GetObject().(*corev1.Pod).Name)
		case clienttesting.DeleteAction:
			out = append(out, "delete "+a.GetName())
		}
	}
	return out
}

func apiPods(t *testing.T, client *fake.Clientset) map[string]*corev1.Pod {
	t.Helper()
	list, err := client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

func TestReconcile(t *testing.T) {
	deleting := mirrorPod("sched-node-1", "h1", "m-sched")
	deleting.DeletionTimestamp = &metav1.Time{}
	apiOnly := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u-web"}}

	cases := []struct {
		name        string
		static      []*corev1.Pod
		mirrors     []*corev1.Pod
		wantActions []string
		wantHashes  map[string]string // mirror pods in the API afterwards: name -> config.mirror
	}{
		{
			name:        "missing mirror created",
			static:      []*corev1.Pod{staticPod("etcd-node-1", "h1")},
			wantActions: []string{"create etcd-node-1"},
			wantHashes:  map[string]string{"etcd-node-1": "h1"},
		},
		{
			name:       "up to date mirror left alone",
			static:     []*corev1.Pod{staticPod("etcd-node-1", "h1")},
			mirrors:    []*corev1.Pod{mirrorPod("etcd-node-1", "h1", "m1")},
			wantHashes: map[string]string{"etcd-node-1": "h1"},
		},
		{
			name:        "stale mirror recreated",
			static:      []*corev1.Pod{staticPod("etcd-node-1", "h2")},
			mirrors:     []*corev1.Pod{mirrorPod("etcd-node-1", "h1", "m1")},
			wantActions: []string{"delete etcd-node-1", "create etcd-node-1"},
			wantHashes:  map[string]string{"etcd-node-1": "h2"},
		},
		{
			name:        "mirror being deleted recreated",
			static:      []*corev1.Pod{staticPod("sched-node-1", "h1")},
			mirrors:     []*corev1.Pod{deleting},
			wantActions: []string{"delete sched-node-1", "create sched-node-1"},
			wantHashes:  map[string]string{"sched-node-1": "h1"},
		},
		{
			name:        "orphan deleted, API pods untouched",
			static:      []*corev1.Pod{apiOnly},
			mirrors:     []*corev1.Pod{mirrorPod("old-node-1", "h1", "m-old"), apiOnly},
			wantActions: []string{"delete old-node-1"},
			wantHashes:  map[string]string{},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := []runtime.Object{node()}
			for _, p := range c.mirrors {
				objs = append(objs, p)
			}
			m, client := newManager(objs...)
			client.ClearActions()
			if err := m.Reconcile(context.Background(), c.static, c.mirrors); err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			if got := podActions(client); strings.Join(got, ",") != strings.Join(c.wantActions, ",") {
				t.Errorf("actions = %v, want %v", got, c.wantActions)
			}
			got := map[string]string{}
			for name, p := range apiPods(t, client) {
				if IsMirrorPod(p) {
					got[name] = p.Annotations[podsource.AnnotationConfigMirror]
				}
			}
			if len(got) != len(c.wantHashes) {
				t.Errorf("mirror pods in the API = %v, want %v", got, c.wantHashes)
			}
			for name, hash := range c.wantHashes {
				if got[name] != hash {
					t.Errorf("mirror %s hash = %q, want %q", name, got[name], hash)
				}
			}
		})
	}
}

func TestMirrorPodContent(t *testing.T) {
	m, client := newManager(node())
	sp := staticPod("etcd-node-1", "h1")
	if err := m.Reconcile(context.Background(), []*corev1.Pod{sp}, nil); err != nil {
		t.Fatal(err)
	}
	mp := apiPods(t, client)["etcd-node-1"]
	if mp == nil {
		t.Fatal("no mirror pod created")
	}
	if mp.Namespace != "kube-system" || mp.Labels["tier"] != "control-plane" {
		t.Errorf("metadata = %s/%s labels %v, want the static pod's", mp.Namespace, mp.Name, mp.Labels)
	}
	for k, want := range map[string]string{
		podsource.AnnotationConfigMirror: "h1",
		podsource.AnnotationConfigHash:   "h1",
		podsource.AnnotationConfigSource: podsource.SourceFile,
	} {
		if mp.Annotations[k] != want {
			t.Errorf("annotation %s = %q, want %q", k, mp.Annotations[k], want)
		}
	}
	if mp.UID == sp.UID {
		t.Errorf("mirror pod carries the static pod's UID")
	}
	if mp.Spec.Containers[0].Image != "i:h1" || mp.Spec.NodeName != nodeName {
		t.Errorf("spec = %+v, want the static pod's", mp.Spec)
	}
	if len(mp.OwnerReferences) != 1 {
		t.Fatalf("ownerReferences = %v, want one", mp.OwnerReferences)
	}
	ref := mp.OwnerReferences[0]
	if ref.APIVersion != "v1" || ref.Kind != "Node" || ref.Name != nodeName || ref.UID != nodeUID || ref.Controller == nil || !*ref.Controller {
		t.Errorf("ownerReference = %+v, want v1 Node %s %s controller", ref, nodeName, nodeUID)
	}
	if _, ok := sp.Annotations[podsource.AnnotationConfigMirror]; ok {
		t.Errorf("the static pod was changed")
	}
}

func TestReconcileNodeNotRegistered(t *testing.T) {
	m, client := newManager()
	err := m.Reconcile(context.Background(), []*corev1.Pod{staticPod("a-node-1", "h1"), staticPod("b-node-1", "h2")}, nil)
	if !errors.Is(err, ErrNodeNotRegistered) || !strings.Contains(err.Error(), nodeName) {
		t.Fatalf("err = %v, want ErrNodeNotRegistered naming the node", err)
	}
	if got := podActions(client); len(got) != 0 {
		t.Errorf("actions = %v, want none", got)
	}
	nodeGets := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" {
			nodeGets++
		}
	}
	if nodeGets != 1 {
		t.Errorf("node read %d times in one Reconcile, want 1", nodeGets)
	}
}

func TestReconcileDeletesWithUIDPrecondition(t *testing.T) {
	orphan := mirrorPod("old-node-1", "h1", "m-old")
	m, client := newManager(node(), orphan)
	if err := m.Reconcile(context.Background(), nil, []*corev1.Pod{orphan}); err != nil {
		t.Fatal(err)
	}
	var opts []metav1.DeleteOptions
	for _, a := range client.Actions() {
		if d, ok := a.(clienttesting.DeleteAction); ok {
			opts = append(opts, d.GetDeleteOptions())
		}
	}
	if len(opts) != 1 || opts[0].Preconditions == nil || opts[0].Preconditions.UID == nil || *opts[0].Preconditions.UID != "m-old" {
		t.Fatalf("delete options = %+v, want one delete with UID precondition m-old", opts)
	}
	if g := opts[0].GracePeriodSeconds; g == nil || *g != 0 {
		t.Errorf("grace period = %v, want 0", g)
	}
}

func TestReconcileJoinsErrors(t *testing.T) {
	m, client := newManager(node())
	client.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.CreateAction).GetObject().(*corev1.Pod).Name == "bad-node-1" {
			return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "bad-node-1", errors.New("denied"))
		}
		return false, nil, nil
	})
	orphanGone := mirrorPod("gone-node-1", "h9", "m-gone") // not in the API: NotFound is fine
	err := m.Reconcile(context.Background(),
		[]*corev1.Pod{staticPod("bad-node-1", "h1"), staticPod("good-node-1", "h2")},
		[]*corev1.Pod{orphanGone})
	if err == nil || !strings.Contains(err.Error(), "create mirror pod kube-system/bad-node-1") {
		t.Fatalf("err = %v, want one naming bad-node-1", err)
	}
	if strings.Contains(err.Error(), "gone-node-1") {
		t.Errorf("err = %v: a mirror pod already gone is no error", err)
	}
	names := []string{}
	for name := range apiPods(t, client) {
		names = append(names, name)
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "good-node-1" {
		t.Errorf("pods in the API = %v, want good-node-1 created despite the other failing", names)
	}
}

func TestCreateAlreadyExists(t *testing.T) {
	// The mirror was created by an earlier call whose answer was lost: same hash is fine,
	// a different one is an error for the caller to retry.
	for _, c := range []struct {
		name, existing string
		wantErr        bool
	}{{"same hash", "h1", false}, {"other hash", "h0", true}} {
		t.Run(c.name, func(t *testing.T) {
			m, _ := newManager(node(), mirrorPod("etcd-node-1", c.existing, "m1"))
			err := m.Reconcile(context.Background(), []*corev1.Pod{staticPod("etcd-node-1", "h1")}, nil)
			if (err != nil) != c.wantErr {
				t.Errorf("err = %v, want error %v", err, c.wantErr)
			}
		})
	}
}

func TestIsMirrorAndStaticPod(t *testing.T) {
	with := func(k, v string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{k: v}}}
	}
	cases := []struct {
		name           string
		pod            *corev1.Pod
		mirror, static bool
	}{
		{"no annotations", &corev1.Pod{}, false, false},
		{"mirror", with(podsource.AnnotationConfigMirror, "h"), true, false},
		{"file", with(podsource.AnnotationConfigSource, podsource.SourceFile), false, true},
		{"http", with(podsource.AnnotationConfigSource, podsource.SourceHTTP), false, true},
		{"api", with(podsource.AnnotationConfigSource, podsource.SourceAPI), false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := IsMirrorPod(c.pod); got != c.mirror {
				t.Errorf("IsMirrorPod = %v, want %v", got, c.mirror)
			}
			if got := IsStaticPod(c.pod); got != c.static {
				t.Errorf("IsStaticPod = %v, want %v", got, c.static)
			}
		})
	}
}

func TestReconcileReplacedMirrorNotRecreated(t *testing.T) {
	// The UID precondition fails: someone replaced the stale mirror meanwhile. Nothing is
	// created on top of it; the next Reconcile sees the new object.
	stale := mirrorPod("etcd-node-1", "h1", "m1")
	m, client := newManager(node(), stale)
	client.PrependReactor("delete", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(corev1.Resource("pods"), "etcd-node-1", errors.New("uid precondition failed"))
	})
	if err := m.Reconcile(context.Background(), []*corev1.Pod{staticPod("etcd-node-1", "h2")}, []*corev1.Pod{stale}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if got := podActions(client); strings.Join(got, ",") != "delete etcd-node-1" {
		t.Errorf("actions = %v, want only the refused delete", got)
	}
}
