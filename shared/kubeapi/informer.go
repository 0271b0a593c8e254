package kubeapi

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ListWatcher is the part of a typed client an informer needs.
type ListWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// NewInformer is an informer of c's objects (example: an empty one of their type),
// indexed by namespace as client-go's informer factory does, without managedFields
// (DropManagedFields) and never resynced. tweak, when set, narrows every list and watch
// (a field selector). client is c's: a client that cannot stream lists in a watch
// (client-go's fake) says so, and the informer lists instead.
func NewInformer[L runtime.Object](client Interface, c ListWatcher[L], example runtime.Object, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
	lw := cache.ToListWatcherWithWatchListSemantics(ListWatch(c, tweak), client)
	inf := cache.NewSharedIndexInformer(lw, example, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := inf.SetTransform(DropManagedFields); err != nil {
		panic(err) // only when the informer has started
	}
	return inf
}

// ListWatch lists and watches c's objects, each request narrowed by tweak when set.
func ListWatch[L runtime.Object](c ListWatcher[L], tweak func(*metav1.ListOptions)) *cache.ListWatch {
	narrow := func(o *metav1.ListOptions) {
		if tweak != nil {
			tweak(o)
		}
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			narrow(&o)
			return c.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			narrow(&o)
			return c.Watch(ctx, o)
		},
	}
}
