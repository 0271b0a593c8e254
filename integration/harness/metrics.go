package harness

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
)

// A node's Metrics entry for a service is one of two forms:
//
//   - host:port: its UNITLET_METRICS_ADDR, a TCP listener, which serves /healthz alone (it
//     has no authentication);
//   - unix:NAME: its UNITLET_METRICS_SOCKET, a Unix socket named NAME in the node's socket
//     directory (/run/unitlet in an nspawn or vm machine, NodeSocketDir on the host, the
//     same directory for an nspawn node), which serves /metrics, /metrics/<name> and the
//     service's pages; a machine's unit keeps its loopback port beside it.
const metricsUnix = "unix:"

// checkMetrics checks node n's metrics entries: each for a service it runs, each value one of
// the two forms, no two services on one socket.
func checkMetrics(n Node) error {
	seen := map[string]string{}
	for _, svc := range slices.Sorted(maps.Keys(n.Metrics)) {
		addr := n.Metrics[svc]
		if !slices.Contains(n.Services, svc) && !slices.Contains(n.HostServices, svc) {
			return fmt.Errorf("metrics.%s: the node runs no unitlet-%s", svc, svc)
		}
		if name, ok := strings.CutPrefix(addr, metricsUnix); ok {
			if name == "" || strings.Contains(name, "/") || name == "." || name == ".." {
				return fmt.Errorf("metrics.%s %q: want unix:NAME, a socket file name (no directory) in the node's socket directory, e.g. unix:%s-metrics.sock", svc, addr, svc)
			}
		} else if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("metrics.%s %q: want host:port (serves /healthz alone) or unix:NAME (a socket in the node's socket directory that serves /metrics and the service's pages): %v", svc, addr, err)
		}
		if other, dup := seen[addr]; dup {
			return fmt.Errorf("metrics.%s %q: unitlet-%s has it too", svc, addr, other)
		}
		seen[addr] = svc
	}
	return nil
}

// metricsEnv is the environment setting of service svc of node n for its metrics entry,
// whose socket directory is socketDir as the service sees it: UNITLET_METRICS_ADDR=host:port
// or UNITLET_METRICS_SOCKET=<socketDir>/NAME; "" when the stack gives the service none.
func metricsEnv(n Node, svc, socketDir string) string {
	addr := n.Metrics[svc]
	switch name, ok := strings.CutPrefix(addr, metricsUnix); {
	case addr == "":
		return ""
	case ok:
		return "UNITLET_METRICS_SOCKET=" + filepath.Join(socketDir, name)
	}
	return "UNITLET_METRICS_ADDR=" + addr
}

// metricsDropIn is the part of the drop-in for service svc of machine node n that sets its
// metrics listener, as an operator opts in: a socket beside the unit's loopback port.
func metricsDropIn(n Node, svc string) string {
	if env := metricsEnv(n, svc, "/run/unitlet"); env != "" {
		return fmt.Sprintf("Environment=%s\n", env)
	}
	return ""
}

// ServicePage GETs path from the metrics socket the stack gives service svc of node (a
// process or nspawn node's unix:NAME entry), as root on the host: /metrics, /configz, ...
func (h *Harness) ServicePage(ctx context.Context, node, svc, path string) (int, string, error) {
	var n *Node
	for i := range h.stack.Nodes {
		if h.stack.Nodes[i].Name == node {
			n = &h.stack.Nodes[i]
		}
	}
	if n == nil {
		return 0, "", fmt.Errorf("the stack has no node %s", node)
	}
	name, ok := strings.CutPrefix(n.Metrics[svc], metricsUnix)
	switch {
	case !ok:
		return 0, "", fmt.Errorf("node %s: the stack gives unitlet-%s no metrics socket (metrics.%s: unix:NAME); a TCP listener serves /healthz alone", node, svc, svc)
	case n.Backend != "process" && n.Backend != "nspawn":
		return 0, "", fmt.Errorf("node %s: a %s node's metrics socket is inside the machine; ask it there (InNode)", node, n.Backend)
	}
	sock := filepath.Join(h.NodeSocketDir(node), name)
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://unitlet-"+svc+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("GET %s on %s: %w", path, sock, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", fmt.Errorf("GET %s on %s: %w", path, sock, err)
	}
	return resp.StatusCode, string(b), nil
}
