package podworker

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/unitlet/unitlet/services/podsync/podsource"
)

// Services are the cluster's services, for the containers' service-link variables (an
// informer's cache of every namespace).
type Services interface {
	List() ([]*corev1.Service, error)
	// HasSynced reports whether the services have been read from the API once.
	HasSynced() bool
}

// errServicesNotSynced is the kubelet's error for a container of an API pod that would
// start before the services were read once: it would miss KUBERNETES_SERVICE_HOST.
var errServicesNotSynced = errors.New("services have not yet been read at least once, cannot construct envvars")

// services are the services for the pod's containers' environment: none on a node
// without an API server. Static pods do not wait for the first read; API pods do.
func (w *worker) services() ([]*corev1.Service, error) {
	s := w.m.o.Services
	if s == nil {
		return nil, nil
	}
	if w.source == podsource.SourceAPI && !s.HasSynced() {
		return nil, errServicesNotSynced
	}
	list, err := s.List()
	if err != nil {
		return nil, fmt.Errorf("failed to list services when setting up env vars")
	}
	return list, nil
}
