//go:build tools

// Package tools pins the metrics-server the harness runs (integration/harness/metricsserver.go):
// the cluster add-on behind `kubectl top` and the HorizontalPodAutoscaler, which scrapes
// each node's /metrics/resource.
package tools

import _ "sigs.k8s.io/metrics-server/cmd/metrics-server"
