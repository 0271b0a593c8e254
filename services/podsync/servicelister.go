package podsync

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/unitlet/unitlet/services/podsync/podworker"
	"github.com/unitlet/unitlet/shared/kubeapi"
)

// serviceLister is the node's cache of the cluster's services, every namespace, for the
// containers' service-link variables: the kubelet's service informer. Headless services
// are not watched (they give no variables). A standalone node has none.
type serviceLister struct {
	informer cache.SharedIndexInformer // nil when standalone
	lister   corelisters.ServiceLister
	synced   cache.InformerSynced
}

// newServiceLister watches the services through client; nil means standalone.
func newServiceLister(client kubeapi.Interface) *serviceLister {
	if client == nil {
		return &serviceLister{}
	}
	notHeadless := fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone).String()
	inf := kubeapi.NewInformer(client, client.CoreV1().Services(""), &corev1.Service{},
		func(o *metav1.ListOptions) { o.FieldSelector = notHeadless })
	return &serviceLister{informer: inf, lister: corelisters.NewServiceLister(inf.GetIndexer()), synced: inf.HasSynced}
}

// Run keeps the cache current until ctx ends (standalone, it only waits for that).
func (s *serviceLister) Run(ctx context.Context) error {
	if s.informer == nil {
		return untilDone(ctx)
	}
	return runInformer(ctx, s.informer)
}

// forWorkers is the services as the pod workers look them up: none on a standalone node,
// whose containers get no service-link variables, as with the kubelet.
func (s *serviceLister) forWorkers() podworker.Services {
	if s.informer == nil {
		return nil
	}
	return s
}

// List is every cached service.
func (s *serviceLister) List() ([]*corev1.Service, error) {
	return s.lister.List(labels.Everything())
}

// HasSynced reports whether the services have been listed once.
func (s *serviceLister) HasSynced() bool { return s.synced() }
