package podsource

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/unitlet/unitlet/shared/kubeapi"
)

// WatchAPI watches the pods bound to nodeName (field selector spec.nodeName) through an
// informer until ctx ends. Once the informer has synced, and after every change, it sends
// the complete set of mirror pods to mirrors and of all other pods to sink (source "api"),
// each pod annotated with its source and the time this process first saw it. The informer
// retries on its own through API server outages; the last sets stay meanwhile.
func WatchAPI(ctx context.Context, client kubeapi.Interface, nodeName string, sink Sink, mirrors MirrorSink, log *slog.Logger) error {
	log = log.With("source", SourceAPI)
	selector := fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
	informer := kubeapi.NewInformer(client, client.CoreV1().Pods(""), &corev1.Pod{},
		func(o *metav1.ListOptions) { o.FieldSelector = selector })

	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}); err != nil {
		return fmt.Errorf("watch pods of node %s: add event handler: %w", nodeName, err)
	}
	var running sync.WaitGroup
	running.Go(func() { informer.RunWithContext(ctx) })
	defer running.Wait()

	log.Info("waiting for the pod informer to sync", "node", nodeName)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil // ctx ended first
	}
	log.Info("pod informer synced", "node", nodeName)

	a := &apiSets{sink: sink, mirrors: mirrors, seen: map[types.UID]string{}, copies: map[types.UID]*corev1.Pod{}}
	for {
		a.publish(informer.GetStore().List(), time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

type apiSets struct {
	sink    Sink
	mirrors MirrorSink
	seen    map[types.UID]string // first-seen time of each pod, by UID
	// copies are the pods last sent, by UID: a pod whose resourceVersion has not changed
	// since is sent again as the same object, so that a change of one pod copies that pod,
	// not every pod of the node.
	copies map[types.UID]*corev1.Pod
}

// publish splits the informer's pods into mirror pods and desired pods and sends both sets.
// The cache's objects are copied, never changed; the sets' pods are the sinks' to read,
// never to change.
func (a *apiSets) publish(objs []any, now time.Time) {
	cached := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			cached = append(cached, p)
		}
	}
	slices.SortFunc(cached, func(x, y *corev1.Pod) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
	})

	desired := []*corev1.Pod{}
	mirrorPods := []*corev1.Pod{}
	seen := make(map[types.UID]string, len(cached))
	copies := make(map[types.UID]*corev1.Pod, len(cached))
	defer func() { a.copies = copies }()
	for _, p := range cached {
		if c, ok := a.copies[p.UID]; ok && p.ResourceVersion != "" && c.ResourceVersion == p.ResourceVersion {
			copies[p.UID] = c
			if _, mirror := c.Annotations[AnnotationConfigMirror]; mirror {
				mirrorPods = append(mirrorPods, c)
			} else {
				seen[p.UID] = a.seen[p.UID]
				desired = append(desired, c)
			}
			continue
		}
		p = p.DeepCopy()
		copies[p.UID] = p
		if _, ok := p.Annotations[AnnotationConfigMirror]; ok {
			mirrorPods = append(mirrorPods, p)
			continue
		}
		first, ok := a.seen[p.UID]
		if !ok {
			first = now.Format(time.RFC3339Nano)
		}
		seen[p.UID] = first
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[AnnotationConfigSource] = SourceAPI
		p.Annotations[AnnotationConfigSeen] = first
		desired = append(desired, p)
	}
	a.seen = seen
	if a.mirrors != nil {
		a.mirrors.SetMirrorPods(mirrorPods)
	}
	a.sink.SetPods(SourceAPI, desired)
}
