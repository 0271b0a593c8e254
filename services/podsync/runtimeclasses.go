package podsync

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/unitlet/unitlet/shared/kube"
)

// runtimeClasses is the node's cache of the cluster's RuntimeClasses (node.k8s.io/v1), for
// the runtime handler of pods that name one: the kubelet's runtime class manager. The
// node authorizer lets every node get, list and watch them.
type runtimeClasses struct {
	factory informers.SharedInformerFactory
	lister  nodelisters.RuntimeClassLister
	synced  cache.InformerSynced
}

func newRuntimeClasses(client kubernetes.Interface) *runtimeClasses {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(kube.DropManagedFields))
	classes := factory.Node().V1().RuntimeClasses()
	return &runtimeClasses{factory: factory, lister: classes.Lister(), synced: classes.Informer().HasSynced}
}

// Run keeps the cache current until ctx ends.
func (r *runtimeClasses) Run(ctx context.Context) error {
	return runFactory(ctx, r.factory)
}

// Handler is the named RuntimeClass's handler. Before the first list the cache cannot
// tell a missing class from one not read yet, so it says so rather than "not found".
func (r *runtimeClasses) Handler(name string) (string, error) {
	if !r.synced() {
		return "", fmt.Errorf("RuntimeClass %s: RuntimeClasses have not yet been read from the API server", name)
	}
	rc, err := r.lister.Get(name)
	if errors.IsNotFound(err) {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("look up RuntimeClass %s: %w", name, err)
	}
	return rc.Handler, nil
}

// runFactory starts factory's informers and stops them when ctx ends. The informers
// retry on their own through API server outages; the caches keep their last objects
// meanwhile.
func runFactory(ctx context.Context, factory informers.SharedInformerFactory) error {
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	return nil
}
