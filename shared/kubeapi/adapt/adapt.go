// Package adapt gives a client-go clientset (a real one, or client-go's fake in tests)
// the shape of kubeapi.Interface. It imports every API group client-go has: services do
// not import it (unitlet-status does, for the node API's authentication clients).
package adapt

import (
	"k8s.io/client-go/kubernetes"

	"github.com/unitlet/unitlet/shared/kubeapi"
)

// Clientset is c as a kubeapi.Interface.
func Clientset(c kubernetes.Interface) kubeapi.Interface { return clientset{c} }

type clientset struct{ c kubernetes.Interface }

// IsWatchListSemanticsUnSupported passes on what c says of streamed lists (client-go's
// fake cannot serve them; an informer over it must list).
func (a clientset) IsWatchListSemanticsUnSupported() bool {
	u, ok := a.c.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && u.IsWatchListSemanticsUnSupported()
}

// One value serves every group: their method names do not overlap.
func (a clientset) CoreV1() kubeapi.CoreV1Interface                 { return a }
func (a clientset) CoordinationV1() kubeapi.CoordinationV1Interface { return a }
func (a clientset) CertificatesV1() kubeapi.CertificatesV1Interface { return a }
func (a clientset) NodeV1() kubeapi.NodeV1Interface                 { return a }
func (a clientset) StorageV1() kubeapi.StorageV1Interface           { return a }

func (a clientset) Pods(ns string) kubeapi.PodInterface         { return a.c.CoreV1().Pods(ns) }
func (a clientset) Nodes() kubeapi.NodeInterface                { return a.c.CoreV1().Nodes() }
func (a clientset) Secrets(ns string) kubeapi.SecretInterface   { return a.c.CoreV1().Secrets(ns) }
func (a clientset) Services(ns string) kubeapi.ServiceInterface { return a.c.CoreV1().Services(ns) }
func (a clientset) Events(ns string) kubeapi.EventInterface     { return a.c.CoreV1().Events(ns) }
func (a clientset) ConfigMaps(ns string) kubeapi.ConfigMapInterface {
	return a.c.CoreV1().ConfigMaps(ns)
}
func (a clientset) PersistentVolumeClaims(ns string) kubeapi.PVCInterface {
	return a.c.CoreV1().PersistentVolumeClaims(ns)
}
func (a clientset) PersistentVolumes() kubeapi.PVInterface { return a.c.CoreV1().PersistentVolumes() }
func (a clientset) ServiceAccounts(ns string) kubeapi.ServiceAccountInterface {
	return a.c.CoreV1().ServiceAccounts(ns)
}
func (a clientset) Leases(ns string) kubeapi.LeaseInterface {
	return a.c.CoordinationV1().Leases(ns)
}
func (a clientset) CertificateSigningRequests() kubeapi.CSRInterface {
	return a.c.CertificatesV1().CertificateSigningRequests()
}
func (a clientset) RuntimeClasses() kubeapi.RuntimeClassIface { return a.c.NodeV1().RuntimeClasses() }
func (a clientset) CSINodes() kubeapi.CSINodeInterface        { return a.c.StorageV1().CSINodes() }
func (a clientset) CSIDrivers() kubeapi.CSIDriverInterface {
	return a.c.StorageV1().CSIDrivers()
}
func (a clientset) VolumeAttachments() kubeapi.VolumeAttachmentIf {
	return a.c.StorageV1().VolumeAttachments()
}
