package nodestatus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/klog/v2"
)

// heartbeatClient builds the client for status patches and the lease, as the kubelet's:
// a copy of the node's config with no client-side rate limit, a timeout of the shorter of
// nodeStatusUpdateFrequency and the lease duration, and a dialer of its own whose
// connections are all closed after repeated heartbeat failures (a connection to an API
// server that went away can otherwise hang every heartbeat until the kernel gives up).
func heartbeatClient(o Options, updateFrequency time.Duration, leaseSeconds int32) (kubernetes.Interface, func(), error) {
	if o.HeartbeatClient != nil {
		return o.HeartbeatClient, nil, nil
	}
	if o.RESTConfig == nil {
		return o.Client, nil, nil
	}
	cfg := rest.CopyConfig(o.RESTConfig)
	cfg.Timeout = min(updateFrequency, time.Duration(leaseSeconds)*time.Second)
	cfg.QPS = -1
	cfg.RateLimiter = nil
	var closeConns func()
	if cfg.Transport == nil {
		dial := cfg.Dial
		if dial == nil {
			dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		}
		d := connrotation.NewDialer(dial)
		cfg.Dial = d.DialContext
		closeConns = d.CloseAll
	} else {
		// A transport given by the caller has its own dialer: close its idle connections.
		transport := cfg.Transport
		closeConns = func() { utilnet.CloseIdleConnectionsFor(transport) }
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("build heartbeat client: %w", err)
	}
	return client, closeConns, nil
}

// RunLease creates the node's Lease in kube-node-lease and renews it every quarter of its
// duration with the kubelet's own lease controller (k8s.io/component-helpers): holder the
// node's name, owned by the Node once it exists (the lease is not created before), five
// immediate retries of a failed renewal, closing the heartbeat connections after repeated
// failures. It returns nil when ctx is done.
func (c *Controller) RunLease(ctx context.Context) error {
	ctrl := lease.NewController(
		c.clock,
		leaseCounter{Interface: c.heartbeat, c: c},
		c.nodeName,
		c.leaseDuration,
		c.onHeartbeatFailure,
		c.renewInterval,
		c.nodeName,
		corev1.NamespaceNodeLease,
		c.processLease(ctx),
	)
	// The controller logs through klog's context logger: send it to ours.
	logger := logr.FromSlogHandler(c.log.With("component", "nodelease").Handler())
	ctrl.Run(klog.NewContext(ctx, logger))
	return nil
}

// processLease finishes each lease the controller writes: its renewTime moved past the
// last one (keepRenewTimeRising), and the Node made its owner so that deleting the Node
// deletes its lease. The Node's UID comes from registration or the status loop, or from
// the API server when neither has seen it yet; without it the lease is not created this
// round, as the kubelet's.
func (c *Controller) processLease(ctx context.Context) lease.ProcessLeaseFunc {
	return func(l *coordinationv1.Lease) error {
		c.keepRenewTimeRising(l)
		if len(l.OwnerReferences) > 0 {
			return nil
		}
		uid := c.knownNodeUID()
		if uid == "" {
			node, err := c.heartbeat.CoreV1().Nodes().Get(ctx, c.nodeName, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get node %s for the lease's owner: %w", c.nodeName, err)
			}
			if node.UID == "" {
				return errors.New("node " + c.nodeName + " has no uid yet")
			}
			uid = node.UID
		}
		l.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: corev1.SchemeGroupVersion.Version,
			Kind:       "Node",
			Name:       c.nodeName,
			UID:        uid,
		}}
		return nil
	}
}

// keepRenewTimeRising makes the renewTime of a lease about to be written later than the
// last one the API server returned. The controller stamps it with the node's wall clock,
// which may step back (NTP, an operator's date -s); but the node lifecycle controller
// counts a renewal only when its renewTime is after the one it saw before, so renewals
// stamped behind it would not count until the clock caught up, and the node would turn
// NotReady after the monitor grace period. Until then each renewal is a microsecond
// (renewTime's precision) after the last.
func (c *Controller) keepRenewTimeRising(l *coordinationv1.Lease) {
	c.mu.Lock()
	last := c.leaseRenewTime
	c.mu.Unlock()
	if l.Spec.RenewTime == nil || last.IsZero() || l.Spec.RenewTime.After(last) {
		return
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: last.Add(time.Microsecond)}
}

// leaseSeen records the renewTime of a lease the API server returned.
func (c *Controller) leaseSeen(l *coordinationv1.Lease) {
	if l == nil || l.Spec.RenewTime == nil {
		return
	}
	c.mu.Lock()
	c.leaseRenewTime = l.Spec.RenewTime.Time
	c.mu.Unlock()
}

// leaseCounter is the heartbeat client with the lease writes counted and the last
// successful one remembered; the lease controller sees it as a plain clientset.
type leaseCounter struct {
	kubernetes.Interface
	c *Controller
}

func (l leaseCounter) CoordinationV1() coordinationclient.CoordinationV1Interface {
	return leaseCoordination{CoordinationV1Interface: l.Interface.CoordinationV1(), c: l.c}
}

type leaseCoordination struct {
	coordinationclient.CoordinationV1Interface
	c *Controller
}

func (l leaseCoordination) Leases(namespace string) coordinationclient.LeaseInterface {
	return leaseWrites{LeaseInterface: l.CoordinationV1Interface.Leases(namespace), c: l.c}
}

type leaseWrites struct {
	coordinationclient.LeaseInterface
	c *Controller
}

func (l leaseWrites) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	// A round starts with a Get while the controller holds no lease.
	l.c.beat(loopLease)
	out, err := l.LeaseInterface.Get(ctx, name, opts)
	if err == nil {
		l.c.leaseSeen(out)
	}
	return out, err
}

func (l leaseWrites) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	out, err := l.LeaseInterface.Create(ctx, lease, opts)
	l.c.leaseWritten(out, err)
	return out, err
}

func (l leaseWrites) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	out, err := l.LeaseInterface.Update(ctx, lease, opts)
	l.c.leaseWritten(out, err)
	return out, err
}

func (c *Controller) leaseWritten(l *coordinationv1.Lease, err error) {
	// Rounds after the first update the lease they hold without a Get.
	c.beat(loopLease)
	c.metrics.leaseRenewals.WithLabelValues(result(err)).Inc()
	if err != nil {
		return
	}
	c.leaseSeen(l)
	c.mu.Lock()
	c.lastLeaseRenew = c.clock.Now()
	c.mu.Unlock()
}

// beat tells Options.Loops that a loop turns.
func (c *Controller) beat(name string) {
	if c.loops != nil {
		c.loops.Beat(name)
	}
}
