// Package status is unitlet-status: the node in the API server (registration, status,
// conditions, the lease heartbeat), pod statuses written to the API and the final deletion
// of terminated pods, node events, and the node's HTTPS API on :10250.
package status
