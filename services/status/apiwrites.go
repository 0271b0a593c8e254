package status

import (
	"context"

	"github.com/unitlet/unitlet/services/status/nodestatus"
	"github.com/unitlet/unitlet/services/status/podstatus"
	"github.com/unitlet/unitlet/shared/daemon"
)

// apiWrites are what unitlet-status writes to the API server, with the watches that wake
// the node status loop: the node's registration, status and lease, the pods' statuses,
// unitlet-eviction's pressure conditions and podsync's graceful node shutdown. A
// standalone node writes nothing: then each of their loops only waits for its end.
type apiWrites struct {
	node     *nodestatus.Controller // nil when standalone
	pods     *podstatus.Manager     // nil when standalone
	pressure *pressureWatch         // nil when standalone
	shutdown *shutdownWatch         // nil when standalone
}

// apiWrites builds the writes and their watches; none when standalone (no client).
func (p parts) apiWrites() (*apiWrites, error) {
	if p.client == nil {
		return &apiWrites{}, nil
	}
	node, err := p.nodeStatus()
	if err != nil {
		return nil, daemon.ConfigError(err)
	}
	return &apiWrites{
		node: node, pods: p.podStatus(), pressure: p.pressure,
		shutdown: newShutdownWatch(p.nc.KubeletConfiguration, p.podsync, p.clk, p.pressure.wake),
	}, nil
}

// NodeStatus registers the node, then keeps its status until ctx ends.
func (w *apiWrites) NodeStatus(ctx context.Context) error {
	if w.node == nil {
		return untilDone(ctx)
	}
	return w.node.Run(ctx)
}

// Lease renews the node's lease until ctx ends.
func (w *apiWrites) Lease(ctx context.Context) error {
	if w.node == nil {
		return untilDone(ctx)
	}
	return w.node.RunLease(ctx)
}

// PodStatuses writes podsync's pod statuses until ctx ends.
func (w *apiWrites) PodStatuses(ctx context.Context) error {
	if w.pods == nil {
		return untilDone(ctx)
	}
	return w.pods.Run(ctx)
}

// Pressure follows unitlet-eviction's conditions until ctx ends.
func (w *apiWrites) Pressure(ctx context.Context) error {
	if w.pressure == nil {
		return untilDone(ctx)
	}
	return w.pressure.Run(ctx)
}

// Shutdown follows podsync's graceful node shutdown until ctx ends.
func (w *apiWrites) Shutdown(ctx context.Context) error {
	if w.shutdown == nil {
		return untilDone(ctx)
	}
	return w.shutdown.Run(ctx)
}

// server is the bus API of the node nodeName, whose node API listens at nodeAPI: with the
// node's status and the pod status writes, or, standalone, without them.
func (w *apiWrites) server(nodeName, nodeAPI string) *Server {
	if w.node == nil {
		return NewServer(nodeName, nodeAPI, nil, nil)
	}
	return NewServer(nodeName, nodeAPI, w.node, w.pods)
}
