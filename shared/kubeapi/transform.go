package kubeapi

import "k8s.io/apimachinery/pkg/api/meta"

// DropManagedFields is an informer transform (informers.WithTransform) that drops
// metadata.managedFields from an object before it enters the cache: server-side apply's
// bookkeeping, which no service reads, is then not held once per informer for every
// object. What is not an object (a cache.DeletedFinalStateUnknown) passes as it is.
func DropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
