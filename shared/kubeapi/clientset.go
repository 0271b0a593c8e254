// Package kubeapi is the services' API client: the few groups a node agent uses, with
// client-go's typed method sets, informers over them, and an event sink.
package kubeapi

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// The services' API client knows only the groups a node agent uses. client-go's
// clientset registers every API group of the release in one scheme when it is imported:
// about 9 MiB of each process's memory (binary pages touched at start and the scheme's
// maps) that a node agent never uses. The interfaces below have client-go's typed method
// names and signatures, so a client-go clientset (and its fake, in tests) fits them
// through the adapt package.

// Scheme holds the types of the groups Interface serves, and metav1's options. It is
// built on first use and shared.
func Scheme() *runtime.Scheme { return codecs().scheme }

// apiCodecs are a scheme and its codecs.
type apiCodecs struct {
	scheme  *runtime.Scheme
	factory serializer.CodecFactory
	params  runtime.ParameterCodec
}

var codecs = sync.OnceValue(func() apiCodecs {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, coordinationv1.AddToScheme, certificatesv1.AddToScheme,
		nodev1.AddToScheme, storagev1.AddToScheme, authenticationv1.AddToScheme,
	} {
		// Adding generated types to a new scheme fails only on a programming error.
		if err := add(s); err != nil {
			panic(err)
		}
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return apiCodecs{scheme: s, factory: serializer.NewCodecFactory(s), params: runtime.NewParameterCodec(s)}
})

// Object is what the typed clients below read and write: client-go's own method set
// (Get, List, Watch, Create, Update, Patch, Delete).
type Object[T runtime.Object, L runtime.Object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// WithStatus is Object with the status subresource.
type WithStatus[T runtime.Object, L runtime.Object] interface {
	Object[T, L]
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

type (
	PodInterface       = WithStatus[*corev1.Pod, *corev1.PodList]
	NodeInterface      = WithStatus[*corev1.Node, *corev1.NodeList]
	SecretInterface    = Object[*corev1.Secret, *corev1.SecretList]
	ConfigMapInterface = Object[*corev1.ConfigMap, *corev1.ConfigMapList]
	ServiceInterface   = Object[*corev1.Service, *corev1.ServiceList]
	EventInterface     = Object[*corev1.Event, *corev1.EventList]
	LeaseInterface     = Object[*coordinationv1.Lease, *coordinationv1.LeaseList]
	CSRInterface       = WithStatus[*certificatesv1.CertificateSigningRequest, *certificatesv1.CertificateSigningRequestList]
	RuntimeClassIface  = Object[*nodev1.RuntimeClass, *nodev1.RuntimeClassList]
	PVCInterface       = WithStatus[*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList]
	PVInterface        = WithStatus[*corev1.PersistentVolume, *corev1.PersistentVolumeList]
	CSINodeInterface   = Object[*storagev1.CSINode, *storagev1.CSINodeList]
	CSIDriverInterface = Object[*storagev1.CSIDriver, *storagev1.CSIDriverList]
	VolumeAttachmentIf = WithStatus[*storagev1.VolumeAttachment, *storagev1.VolumeAttachmentList]
)

// ServiceAccountInterface adds the token subresource to a service account's client.
type ServiceAccountInterface interface {
	Object[*corev1.ServiceAccount, *corev1.ServiceAccountList]
	CreateToken(ctx context.Context, serviceAccountName string, tokenRequest *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error)
}

// Interface is the API a unitlet service may call.
type Interface interface {
	CoreV1() CoreV1Interface
	CoordinationV1() CoordinationV1Interface
	CertificatesV1() CertificatesV1Interface
	NodeV1() NodeV1Interface
	StorageV1() StorageV1Interface
}

type CoreV1Interface interface {
	Pods(namespace string) PodInterface
	Nodes() NodeInterface
	Secrets(namespace string) SecretInterface
	ConfigMaps(namespace string) ConfigMapInterface
	Services(namespace string) ServiceInterface
	ServiceAccounts(namespace string) ServiceAccountInterface
	Events(namespace string) EventInterface
	PersistentVolumeClaims(namespace string) PVCInterface
	PersistentVolumes() PVInterface
}

type CoordinationV1Interface interface {
	Leases(namespace string) LeaseInterface
}

type CertificatesV1Interface interface {
	CertificateSigningRequests() CSRInterface
}

type StorageV1Interface interface {
	CSINodes() CSINodeInterface
	CSIDrivers() CSIDriverInterface
	VolumeAttachments() VolumeAttachmentIf
}

type NodeV1Interface interface {
	RuntimeClasses() RuntimeClassIface
}

// NewForConfig is rc's client of Interface's groups, in protobuf where the API server
// offers it and rc asks for it (as client-go's), JSON otherwise. As client-go's clientset,
// the groups share one HTTP client (one connection) and one rate limiter of rc's QPS and
// burst.
func NewForConfig(rc *rest.Config) (Interface, error) {
	shared := rest.CopyConfig(rc)
	if shared.UserAgent == "" {
		shared.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if shared.RateLimiter == nil && shared.QPS > 0 {
		if shared.Burst <= 0 {
			return nil, fmt.Errorf("API client: burst must be positive when QPS is (%v)", shared.QPS)
		}
		shared.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(shared.QPS, shared.Burst)
	}
	hc, err := rest.HTTPClientFor(shared)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	groups := []struct {
		path string
		gv   schema.GroupVersion
	}{
		{"/api", corev1.SchemeGroupVersion},
		{"/apis", coordinationv1.SchemeGroupVersion},
		{"/apis", certificatesv1.SchemeGroupVersion},
		{"/apis", nodev1.SchemeGroupVersion},
		{"/apis", storagev1.SchemeGroupVersion},
	}
	clients := make([]rest.Interface, len(groups))
	for i, g := range groups {
		c := rest.CopyConfig(shared)
		c.GroupVersion, c.APIPath = &g.gv, g.path
		c.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(codecs().scheme, codecs().factory).WithoutConversion()
		if clients[i], err = rest.RESTClientForConfigAndClient(c, hc); err != nil {
			return nil, fmt.Errorf("API client for %s: %w", g.gv, err)
		}
	}
	return &clientset{core: coreClient{clients[0]}, coordination: coordinationClient{clients[1]},
		certificates: certificatesClient{clients[2]}, node: nodeClient{clients[3]}, storage: storageClient{clients[4]}}, nil
}

type clientset struct {
	core         coreClient
	coordination coordinationClient
	certificates certificatesClient
	node         nodeClient
	storage      storageClient
}

func (c *clientset) CoreV1() CoreV1Interface                 { return c.core }
func (c *clientset) CoordinationV1() CoordinationV1Interface { return c.coordination }
func (c *clientset) CertificatesV1() CertificatesV1Interface { return c.certificates }
func (c *clientset) NodeV1() NodeV1Interface                 { return c.node }
func (c *clientset) StorageV1() StorageV1Interface           { return c.storage }

func typed[T interface {
	runtime.Object
	metav1.Object
}, L runtime.Object](r rest.Interface, resource, namespace string, protobuf bool) *gentype.ClientWithList[T, L] {
	var opts []gentype.Option[T]
	if protobuf {
		opts = append(opts, gentype.PrefersProtobuf[T]())
	}
	return gentype.NewClientWithList[T, L](resource, r, codecs().params, namespace,
		func() T { return newOf[T]() }, func() L { return newOf[L]() }, opts...)
}

// newOf allocates the struct a pointer type T points to.
func newOf[T runtime.Object]() T {
	return reflect.New(reflect.TypeFor[T]().Elem()).Interface().(T)
}

type coreClient struct{ r rest.Interface }

// The core group's types all have protobuf encodings, as client-go's generated clients say.
func (c coreClient) Pods(ns string) PodInterface {
	return typed[*corev1.Pod, *corev1.PodList](c.r, "pods", ns, true)
}
func (c coreClient) Nodes() NodeInterface {
	return typed[*corev1.Node, *corev1.NodeList](c.r, "nodes", "", true)
}
func (c coreClient) Secrets(ns string) SecretInterface {
	return typed[*corev1.Secret, *corev1.SecretList](c.r, "secrets", ns, true)
}
func (c coreClient) ConfigMaps(ns string) ConfigMapInterface {
	return typed[*corev1.ConfigMap, *corev1.ConfigMapList](c.r, "configmaps", ns, true)
}
func (c coreClient) Services(ns string) ServiceInterface {
	return typed[*corev1.Service, *corev1.ServiceList](c.r, "services", ns, true)
}
func (c coreClient) Events(ns string) EventInterface {
	return typed[*corev1.Event, *corev1.EventList](c.r, "events", ns, true)
}
func (c coreClient) PersistentVolumeClaims(ns string) PVCInterface {
	return typed[*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList](c.r, "persistentvolumeclaims", ns, true)
}
func (c coreClient) PersistentVolumes() PVInterface {
	return typed[*corev1.PersistentVolume, *corev1.PersistentVolumeList](c.r, "persistentvolumes", "", true)
}
func (c coreClient) ServiceAccounts(ns string) ServiceAccountInterface {
	return serviceAccounts{typed[*corev1.ServiceAccount, *corev1.ServiceAccountList](c.r, "serviceaccounts", ns, true)}
}

type serviceAccounts struct {
	*gentype.ClientWithList[*corev1.ServiceAccount, *corev1.ServiceAccountList]
}

func (s serviceAccounts) CreateToken(ctx context.Context, name string, tr *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error) {
	out := &authenticationv1.TokenRequest{}
	err := s.GetClient().Post().UseProtobufAsDefault().
		Namespace(s.GetNamespace()).Resource("serviceaccounts").Name(name).SubResource("token").
		VersionedParams(&opts, codecs().params).Body(tr).Do(ctx).Into(out)
	return out, err
}

type coordinationClient struct{ r rest.Interface }

func (c coordinationClient) Leases(ns string) LeaseInterface {
	return typed[*coordinationv1.Lease, *coordinationv1.LeaseList](c.r, "leases", ns, true)
}

type certificatesClient struct{ r rest.Interface }

func (c certificatesClient) CertificateSigningRequests() CSRInterface {
	return typed[*certificatesv1.CertificateSigningRequest, *certificatesv1.CertificateSigningRequestList](c.r, "certificatesigningrequests", "", true)
}

type nodeClient struct{ r rest.Interface }

func (c nodeClient) RuntimeClasses() RuntimeClassIface {
	return typed[*nodev1.RuntimeClass, *nodev1.RuntimeClassList](c.r, "runtimeclasses", "", true)
}

type storageClient struct{ r rest.Interface }

// The storage group's types have protobuf encodings too.
func (c storageClient) CSINodes() CSINodeInterface {
	return typed[*storagev1.CSINode, *storagev1.CSINodeList](c.r, "csinodes", "", true)
}
func (c storageClient) CSIDrivers() CSIDriverInterface {
	return typed[*storagev1.CSIDriver, *storagev1.CSIDriverList](c.r, "csidrivers", "", true)
}
func (c storageClient) VolumeAttachments() VolumeAttachmentIf {
	return typed[*storagev1.VolumeAttachment, *storagev1.VolumeAttachmentList](c.r, "volumeattachments", "", true)
}
