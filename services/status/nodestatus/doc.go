// Package nodestatus puts this node in the API server as the kubelet does: it registers the
// Node (or reconciles the one that exists), computes the node's status every
// nodeStatusUpdateFrequency (conditions, system info, capacity, addresses, images) and
// patches it when it changed or nodeStatusReportFrequency passed, records the node's events
// (Starting, NodeReady, NodeNotReady, NodeHasSufficientMemory, ...), and renews the node's
// Lease in kube-node-lease with a heartbeat client of its own.
package nodestatus
