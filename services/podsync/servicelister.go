package podsync

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/unitlet/unitlet/shared/kube"
)

// serviceLister is the node's cache of the cluster's services, every namespace, for the
// containers' service-link variables: the kubelet's service informer. Headless services
// are not watched (they give no variables).
type serviceLister struct {
	factory informers.SharedInformerFactory
	lister  corelisters.ServiceLister
	synced  cache.InformerSynced
}

func newServiceLister(client kubernetes.Interface) *serviceLister {
	notHeadless := fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone).String()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = notHeadless }),
		informers.WithTransform(kube.DropManagedFields))
	services := factory.Core().V1().Services()
	return &serviceLister{factory: factory, lister: services.Lister(), synced: services.Informer().HasSynced}
}

// Run keeps the cache current until ctx ends.
func (s *serviceLister) Run(ctx context.Context) error {
	return runFactory(ctx, s.factory)
}

// List is every cached service.
func (s *serviceLister) List() ([]*corev1.Service, error) {
	return s.lister.List(labels.Everything())
}

// HasSynced reports whether the services have been listed once.
func (s *serviceLister) HasSynced() bool { return s.synced() }
