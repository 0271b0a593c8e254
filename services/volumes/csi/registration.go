// Package csi is unitlet-volumes' side of CSI node plugins, as the kubelet's CSI volume
// plugin has it: drivers register through the plugin watcher (a registration socket in
// <root-dir>/plugins_registry, as node-driver-registrar makes it); each registered driver
// is asked for its node information (NodeGetInfo), which goes into the node's CSINode
// object (node ID, topology keys, the volume limit) and onto the Node (the
// csi.volume.kubernetes.io/nodeid annotation and the topology labels); a driver whose
// socket goes is taken out of CSINode and the annotation again.
package csi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// callTimeout bounds a call to a driver when its registration names none: the kubelet's.
const callTimeout = 2 * time.Minute

// Driver is a registered CSI driver.
type Driver struct {
	Name, Endpoint string
	// Version is the highest CSI version of those the driver offered that unitlet speaks.
	Version *utilversion.Version
	NodeID  string
}

// Handler is the plugin watcher's handler of CSIPlugin registrations.
type Handler struct {
	nodes NodeInfo
	// info asks a driver at an endpoint for its node information.
	info func(ctx context.Context, endpoint string) (NodeInfoReply, error)
	log  *slog.Logger

	mu      sync.Mutex
	drivers map[string]Driver
}

// NodeInfoReply is what a driver's NodeGetInfo says.
type NodeInfoReply struct {
	NodeID             string
	MaxVolumesPerNode  int64
	AccessibleTopology map[string]string
}

// NodeInfo records a driver in the node's API objects (CSINode, the Node).
type NodeInfo interface {
	InstallDriver(ctx context.Context, name string, info NodeInfoReply) error
	UninstallDriver(ctx context.Context, name string) error
}

// NewHandler handles CSI drivers' registrations, recording them through nodes.
func NewHandler(nodes NodeInfo, log *slog.Logger) *Handler {
	return &Handler{nodes: nodes, info: nodeGetInfo, log: log, drivers: map[string]Driver{}}
}

// ValidatePlugin accepts a driver that offers a CSI 1.x version and is not already
// registered with a version as high or higher.
func (h *Handler) ValidatePlugin(name, endpoint string, versions []string) error {
	if _, err := h.validVersion(name, versions); err != nil {
		return fmt.Errorf("validation failed for CSI driver %s at endpoint %s: %w", name, endpoint, err)
	}
	return nil
}

func (h *Handler) validVersion(name string, versions []string) (*utilversion.Version, error) {
	if len(versions) == 0 {
		return nil, fmt.Errorf("CSI driver %q offered no supported versions", name)
	}
	v, err := utilversion.HighestSupportedVersion(versions)
	if err != nil {
		return nil, fmt.Errorf("CSI driver %q: none of the versions %q is supported (unitlet speaks CSI 1.x): %w", name, versions, err)
	}
	h.mu.Lock()
	old, ok := h.drivers[name]
	h.mu.Unlock()
	if ok && !old.Version.LessThan(v) {
		return nil, fmt.Errorf("CSI driver %q is already registered with version %s, as high or higher than %s", name, old.Version, v)
	}
	return v, nil
}

// RegisterPlugin registers a driver: its node information asked (within timeout, else
// callTimeout) and recorded in CSINode and on the Node. A failure leaves it unregistered.
func (h *Handler) RegisterPlugin(name, endpoint string, versions []string, timeout *time.Duration) error {
	v, err := h.validVersion(name, versions)
	if err != nil {
		return err
	}
	d := callTimeout
	if timeout != nil {
		d = *timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	info, err := h.info(ctx, endpoint)
	if err != nil {
		return fmt.Errorf("CSI driver %s at %s: NodeGetInfo: %w", name, endpoint, err)
	}
	if info.NodeID == "" {
		return fmt.Errorf("CSI driver %s at %s: NodeGetInfo answered no node_id", name, endpoint)
	}
	if err := h.nodes.InstallDriver(ctx, name, info); err != nil {
		return fmt.Errorf("CSI driver %s: record it in CSINode and on the Node: %w", name, err)
	}
	h.mu.Lock()
	h.drivers[name] = Driver{Name: name, Endpoint: endpoint, Version: v, NodeID: info.NodeID}
	h.mu.Unlock()
	h.log.Info("CSI driver registered", "driver", name, "endpoint", endpoint, "version", v.String(), "nodeID", info.NodeID,
		"maxVolumesPerNode", info.MaxVolumesPerNode, "topology", info.AccessibleTopology)
	return nil
}

// DeRegisterPlugin takes a driver whose registration socket went out of CSINode and the
// Node's annotation (its topology labels stay, as the kubelet leaves them).
func (h *Handler) DeRegisterPlugin(name, endpoint string) {
	h.mu.Lock()
	delete(h.drivers, name)
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := h.nodes.UninstallDriver(ctx, name); err != nil {
		h.log.Error("CSI driver deregistered, but CSINode or the Node still names it", "driver", name, "endpoint", endpoint, "err", err)
		return
	}
	h.log.Info("CSI driver deregistered", "driver", name, "endpoint", endpoint)
}

// Driver is the registered driver of that name.
func (h *Handler) Driver(name string) (Driver, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.drivers[name]
	if !ok {
		return Driver{}, fmt.Errorf("CSI driver %q is not registered on this node (its node plugin, with node-driver-registrar, must run here)", name)
	}
	return d, nil
}

// Drivers are the registered drivers, by name.
func (h *Handler) Drivers() []Driver {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Driver, 0, len(h.drivers))
	for _, d := range h.drivers {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// errNoAPI is the reason a standalone node records no driver.
var errNoAPI = errors.New("no API server: this node runs standalone")
