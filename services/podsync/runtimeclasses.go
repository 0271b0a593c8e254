package podsync

import (
	"context"
	"fmt"

	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/unitlet/unitlet/services/podsync/podworker"
	"github.com/unitlet/unitlet/shared/kubeapi"
)

// runtimeClasses is the node's cache of the cluster's RuntimeClasses (node.k8s.io/v1), for
// the runtime handler of pods that name one: the kubelet's runtime class manager. The
// node authorizer lets every node get, list and watch them. A standalone node has none.
type runtimeClasses struct {
	informer cache.SharedIndexInformer // nil when standalone
	lister   nodelisters.RuntimeClassLister
	synced   cache.InformerSynced
}

// newRuntimeClasses watches the RuntimeClasses through client; nil means standalone.
func newRuntimeClasses(client kubeapi.Interface) *runtimeClasses {
	if client == nil {
		return &runtimeClasses{}
	}
	inf := kubeapi.NewInformer(client, client.NodeV1().RuntimeClasses(), &nodev1.RuntimeClass{}, nil)
	return &runtimeClasses{informer: inf, lister: nodelisters.NewRuntimeClassLister(inf.GetIndexer()), synced: inf.HasSynced}
}

// Run keeps the cache current until ctx ends (standalone, it only waits for that).
func (r *runtimeClasses) Run(ctx context.Context) error {
	if r.informer == nil {
		return untilDone(ctx)
	}
	return runInformer(ctx, r.informer)
}

// forWorkers is the RuntimeClasses as the pod workers resolve them: none on a standalone
// node, where pods that name a RuntimeClass do not run (podworker.Options.RuntimeClasses).
func (r *runtimeClasses) forWorkers() podworker.RuntimeClasses {
	if r.informer == nil {
		return nil
	}
	return r
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

// runInformer runs inf until ctx ends. The informer retries on its own through API
// server outages; its cache keeps the last objects meanwhile.
func runInformer(ctx context.Context, inf cache.SharedIndexInformer) error {
	inf.RunWithContext(ctx)
	return nil
}
