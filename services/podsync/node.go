package podsync

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/kubeapi"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/nodeinfo"
)

// Which node admission judged a pod against: the Node object in the API server, or the
// one built from the configuration and the machine.
const (
	viewAPI   = "api"
	viewLocal = "local"
)

// staticSourceSyncBound is how long the static pod sources wait for the Node informer
// before they admit pods against the local view: a control plane's API server may itself
// be a static pod, so they cannot wait for the API without bound.
const staticSourceSyncBound = 10 * time.Second

// localNode is the node built from the configuration and the machine's resources.
func localNode(nc *nodeconfig.Config, machine nodeinfo.Machine) (*corev1.Node, error) {
	node, err := nodeinfo.Node(nc.KubeletConfiguration, nc.Identity(), machine)
	if err != nil {
		return nil, daemon.ConfigError(err)
	}
	return node, nil
}

// nodeView is the node as admission sees it, as the kubelet's getNodeAnyWay gives it:
// the node's own Node from the API server (its labels, taints and allocatable, kept by
// an informer watching that one object) once it is registered; the local node when
// standalone or while the API has no such Node. Through an API server outage the
// informer keeps the last Node it saw, and admission goes on using it.
type nodeView struct {
	local    *corev1.Node
	name     string
	log      *slog.Logger
	informer cache.SharedIndexInformer // nil when standalone
	lister   corelisters.NodeLister
	synced   cache.InformerSynced

	mu       sync.Mutex
	lastView string // the view last logged
}

// newNodeView is the view of node name; client nil means standalone (the local node only).
func newNodeView(local *corev1.Node, client kubeapi.Interface, log *slog.Logger) *nodeView {
	v := &nodeView{local: local, name: local.Name, log: log}
	if client == nil {
		return v
	}
	// The node authorizer lets a node list and watch only its own Node, by this selector.
	byName := fields.OneTermEqualSelector(metav1.ObjectNameField, local.Name).String()
	informer := kubeapi.NewInformer(client, client.CoreV1().Nodes(), &corev1.Node{},
		func(o *metav1.ListOptions) { o.FieldSelector = byName })
	v.informer = informer
	// Before Start, as client-go requires: the informer retries by itself; say that
	// admission keeps the last Node seen meanwhile.
	_ = informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return // stopping, or a watch ended as watches do: the informer lists again
		}
		v.log.Warn("watch the node's Node failed, will retry; admission keeps the last Node seen", "node", v.name, "err", err)
	})
	v.lister, v.synced = corelisters.NewNodeLister(informer.GetIndexer()), informer.HasSynced
	return v
}

// Run keeps the Node current until ctx ends (standalone, it only waits for that).
func (v *nodeView) Run(ctx context.Context) error {
	if v.informer == nil {
		<-ctx.Done()
		return nil
	}
	return runInformer(ctx, v.informer)
}

// WaitSynced waits until the Node informer has listed once (at once when standalone), at
// most bound (no bound when 0), or until ctx ends. The kubelet's API pod source waits
// for its node informer too: pods readmitted after a restart are judged by the Node's
// labels and taints, not rejected for the lack of them.
func (v *nodeView) WaitSynced(ctx context.Context, source string, bound time.Duration) {
	if v.synced == nil || v.synced() {
		return
	}
	wait := ctx
	if bound > 0 {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	v.log.Info("waiting for the Node informer to sync before admitting pods", "source", source, "node", v.name)
	if cache.WaitForCacheSync(wait.Done(), v.synced) {
		v.log.Info("Node informer synced", "source", source, "node", v.name)
		return
	}
	if ctx.Err() == nil {
		v.log.Warn("the Node informer has not synced in time: until it does, pods are admitted against the local node",
			"source", source, "node", v.name, "waited", bound)
	}
}

// Get is the node admission judges a pod against, and which view it is (viewAPI,
// viewLocal). A change of view is logged.
func (v *nodeView) Get() (*corev1.Node, string) {
	node, view, why := v.local, viewLocal, "running standalone"
	if v.lister != nil {
		switch n, err := v.lister.Get(v.name); {
		case err == nil:
			node, view, why = n, viewAPI, "the Node in the API server"
		case apierrors.IsNotFound(err) && !v.synced():
			why = "the Node informer has not synced yet"
		case apierrors.IsNotFound(err):
			why = "the API server has no Node " + v.name + " yet"
		default:
			why = "get the Node from the informer: " + err.Error()
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if view != v.lastView {
		v.lastView = view
		v.log.Info("admission judges pods against another view of the node", "view", view, "node", v.name, "why", why)
	}
	return node, view
}
