package status

import (
	"context"

	statusv1 "github.com/unitlet/unitlet/proto/unitlet/status/v1"
)

// NodeReporter gives the node's status as last computed.
type NodeReporter interface {
	Status() *statusv1.NodeStatus
}

// PodWrites gives the pod status manager's counts.
type PodWrites interface {
	Stats() (writes uint64, pending int)
}

// Server is the bus API of unitlet-status.
type Server struct {
	statusv1.UnimplementedStatusServiceServer
	nodeName, nodeAPI string
	node              NodeReporter // nil when standalone
	pods              PodWrites    // nil when standalone
}

// NewServer returns the bus API of the node nodeName, whose node API listens at nodeAPI.
// node and pods are nil on a standalone node.
func NewServer(nodeName, nodeAPI string, node NodeReporter, pods PodWrites) *Server {
	return &Server{nodeName: nodeName, nodeAPI: nodeAPI, node: node, pods: pods}
}

// GetNodeStatus reports the registration, conditions, lease and pod status writes.
func (s *Server) GetNodeStatus(context.Context, *statusv1.GetNodeStatusRequest) (*statusv1.GetNodeStatusResponse, error) {
	out := &statusv1.NodeStatus{NodeName: s.nodeName, Standalone: s.node == nil, NodeApiAddress: s.nodeAPI}
	if s.node != nil {
		out = s.node.Status()
		out.NodeName, out.NodeApiAddress = s.nodeName, s.nodeAPI
	}
	if s.pods != nil {
		w, p := s.pods.Stats()
		out.PodStatusWrites, out.PodStatusPending = w, uint32(p)
	}
	return &statusv1.GetNodeStatusResponse{Status: out}, nil
}
