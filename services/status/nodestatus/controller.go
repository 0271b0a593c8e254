package nodestatus

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	statusv1 "github.com/unitlet/unitlet/proto/unitlet/status/v1"
	"github.com/unitlet/unitlet/shared/liveness"
)

// RuntimeSource is podsync's runtime health over the bus; an error means podsync is
// unreachable.
type RuntimeSource interface {
	RuntimeHealth(ctx context.Context) (*podsyncv1.RuntimeHealth, error)
}

// PressureSource gives the MemoryPressure, DiskPressure and PIDPressure conditions from
// unitlet-eviction. Only Type, Status, Reason and Message of its answer are used.
type PressureSource interface {
	Pressure(ctx context.Context) ([]corev1.NodeCondition, error)
}

// ImageSource lists the runtime's images (CRI ListImages) for node.status.images.
type ImageSource interface {
	Images(ctx context.Context) ([]corev1.ContainerImage, error)
}

// Options is what a Controller needs.
type Options struct {
	// Client is the node's client (rate limited), used for registration.
	Client kubernetes.Interface
	// RESTConfig builds the heartbeat client for status patches and the lease: its own
	// timeout, no client-side rate limit, and a dialer whose connections are all closed
	// after repeated heartbeat failures. Nil means HeartbeatClient, or else Client, is used.
	RESTConfig *rest.Config
	// HeartbeatClient replaces the client built from RESTConfig (tests).
	HeartbeatClient kubernetes.Interface
	NodeName        string
	// Build returns the registration Node: labels, taints, annotations, capacity,
	// allocatable, addresses (shared/nodeinfo.Node).
	Build func() (*corev1.Node, error)
	// Config gives nodeStatusUpdateFrequency, nodeStatusReportFrequency,
	// nodeLeaseDurationSeconds, nodeStatusMaxImages, registerNode and port. Zero values
	// take the kubelet's defaults.
	Config  *kubeletconfigv1beta1.KubeletConfiguration
	Runtime RuntimeSource
	// Services checks the other unitlet services; its error names the one that is
	// unreachable ("unitlet-config unreachable: ..."). May be nil.
	Services func(ctx context.Context) error
	// Pressure may be nil: no eviction service.
	Pressure PressureSource
	// Wake, when set, makes the status loop sync at once (a pressure condition changed)
	// instead of at its next period.
	Wake <-chan struct{}
	// Images may be nil: node.status.images stays empty.
	Images ImageSource
	// VolumesInUse lists the attached volumes the node's pods use (unitlet-volumes); nil,
	// or an error, leaves the Node's status.volumesInUse as it is.
	VolumesInUse func(ctx context.Context) ([]corev1.UniqueVolumeName, error)
	Recorder     record.EventRecorder
	// Loops, when set, is told when the status and lease loops turn (loopStatus,
	// loopLease), for the service's health check: a stuck loop stops the watchdog.
	Loops    *liveness.Loops
	Clock    clock.Clock
	Log      *slog.Logger
	Registry prometheus.Registerer
}

// The names of the loops in Options.Loops.
const (
	loopStatus = "the node status loop"
	loopLease  = "the lease loop"
)

// The kubelet's defaults for the settings this package reads.
const (
	defaultUpdateFrequency = 10 * time.Second
	defaultReportFrequency = 5 * time.Minute
	defaultLeaseDuration   = 40
	defaultMaxImages       = 50
	defaultPort            = 10250
	// renewFraction is the part of the lease duration between renewals (the kubelet's).
	renewFraction = 0.25
)

// Controller registers the node, keeps its status and renews its lease.
type Controller struct {
	client    kubernetes.Interface
	heartbeat kubernetes.Interface
	// onHeartbeatFailure runs after repeated status or lease write failures.
	onHeartbeatFailure func()
	nodeName           string
	nodeRef            *corev1.ObjectReference
	build              func() (*corev1.Node, error)
	runtime            RuntimeSource
	services           func(ctx context.Context) error
	pressure           PressureSource
	wake               <-chan struct{}
	images             ImageSource
	volumesInUse       func(ctx context.Context) ([]corev1.UniqueVolumeName, error)
	recorder           record.EventRecorder
	clock              clock.Clock
	log                *slog.Logger
	metrics            *metrics
	host               hostFiles

	registerNode    bool
	loops           *liveness.Loops // nil: no health check
	updateFrequency time.Duration
	reportFrequency time.Duration
	leaseDuration   int32
	renewInterval   time.Duration
	maxImages       int32
	port            int32

	// Touched only by Run's goroutine.
	loop loopState

	mu                sync.Mutex
	registered        bool
	registrationError string
	nodeUID           types.UID
	conditions        []corev1.NodeCondition
	lastStatusUpdate  time.Time
	lastLeaseRenew    time.Time
	// leaseRenewTime is the latest renewTime the API server returned for the lease.
	leaseRenewTime time.Time
}

// loopState is what the status loop remembers between two syncs.
type loopState struct {
	// lastReport is when the status was last written; zero before the first write.
	lastReport time.Time
	podsync    outage
	services   outage
	// lastHealth is podsync's last answer, used for the runtime version while it is
	// unreachable.
	lastHealth *podsyncv1.RuntimeHealth
	system     *systemInfo
	// pending is the observation registration made, for the first sync to use.
	pending *observation
}

// New checks o and builds a Controller; it writes nothing yet.
func New(o Options) (*Controller, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("new node status controller: client: required")
	case o.NodeName == "":
		return nil, errors.New("new node status controller: node name: required")
	case o.Build == nil:
		return nil, errors.New("new node status controller: build: required")
	case o.Runtime == nil:
		return nil, errors.New("new node status controller: runtime source: required")
	}
	c := &Controller{
		client:          o.Client,
		nodeName:        o.NodeName,
		nodeRef:         &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: o.NodeName},
		build:           o.Build,
		runtime:         o.Runtime,
		services:        o.Services,
		pressure:        o.Pressure,
		wake:            o.Wake,
		images:          o.Images,
		volumesInUse:    o.VolumesInUse,
		recorder:        o.Recorder,
		clock:           o.Clock,
		log:             o.Log,
		host:            hostFiles{root: "/"},
		registerNode:    true,
		updateFrequency: defaultUpdateFrequency,
		reportFrequency: defaultReportFrequency,
		leaseDuration:   defaultLeaseDuration,
		maxImages:       defaultMaxImages,
		port:            defaultPort,
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c.log = c.log.With("component", "nodestatus")
	if kc := o.Config; kc != nil {
		if kc.RegisterNode != nil {
			c.registerNode = *kc.RegisterNode
		}
		if d := kc.NodeStatusUpdateFrequency.Duration; d > 0 {
			c.updateFrequency = d
		}
		if d := kc.NodeStatusReportFrequency.Duration; d > 0 {
			c.reportFrequency = d
		}
		if kc.NodeLeaseDurationSeconds > 0 {
			c.leaseDuration = kc.NodeLeaseDurationSeconds
		}
		if kc.NodeStatusMaxImages != nil {
			c.maxImages = *kc.NodeStatusMaxImages
		}
		if kc.Port > 0 {
			c.port = kc.Port
		}
	}
	c.renewInterval = time.Duration(float64(time.Duration(c.leaseDuration)*time.Second) * renewFraction)
	if c.loops = o.Loops; c.loops != nil {
		// Generous: a round may wait on a slow API server; only a loop that stopped
		// turning fails.
		c.loops.Watch(loopStatus, max(10*c.updateFrequency, 5*time.Minute))
		c.loops.Watch(loopLease, max(10*c.renewInterval, 2*time.Minute))
	}

	var err error
	c.heartbeat, c.onHeartbeatFailure, err = heartbeatClient(o, c.updateFrequency, c.leaseDuration)
	if err != nil {
		return nil, err
	}
	c.metrics, err = newMetrics(o.Registry, o.NodeName)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Status is the node as last registered, computed and written, for the bus.
func (c *Controller) Status() *statusv1.NodeStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := &statusv1.NodeStatus{
		NodeName:          c.nodeName,
		Registered:        c.registered,
		RegistrationError: c.registrationError,
		LastStatusUpdate:  timestamp(c.lastStatusUpdate),
		LastLeaseRenew:    timestamp(c.lastLeaseRenew),
	}
	for _, cond := range c.conditions {
		out.Conditions = append(out.Conditions, &statusv1.Condition{
			Type:               string(cond.Type),
			Status:             string(cond.Status),
			Reason:             cond.Reason,
			Message:            cond.Message,
			LastTransitionTime: timestamp(cond.LastTransitionTime.Time),
		})
	}
	return out
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// event records a node event with the kubelet's message form.
func (c *Controller) event(eventType, reason string) {
	if c.recorder == nil {
		return
	}
	c.recorder.Eventf(c.nodeRef, eventType, reason, "Node %s status is now: %s", c.nodeName, reason)
}

// setRegistered records the outcome of a registration attempt.
func (c *Controller) setRegistered(node *corev1.Node, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.registered = false
		c.registrationError = err.Error()
		return
	}
	c.registered = true
	c.registrationError = ""
	if node != nil && node.UID != "" {
		c.nodeUID = node.UID
	}
}

func (c *Controller) isRegistered() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.registered
}

func (c *Controller) knownNodeUID() types.UID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodeUID
}
