// Package cri is a connection to the container runtime over the CRI v1 API (podsync drives
// the runtime through it; status reads images, stats and logs).
package cri

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maxMessageSize is the largest CRI message accepted, as the kubelet's (16 MiB): lists of
// many containers are big.
const maxMessageSize = 16 << 20

// Client is the runtime and image services of one CRI endpoint.
type Client struct {
	runtimeapi.RuntimeServiceClient
	runtimeapi.ImageServiceClient
	conn *grpc.ClientConn
}

// Dial connects to a CRI endpoint, "unix:///run/containerd/containerd.sock" or a socket
// path. The connection is made lazily and re-made after the runtime restarts.
func Dial(endpoint string) (*Client, error) {
	path := strings.TrimPrefix(endpoint, "unix://")
	if path == "" || !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("container runtime endpoint %q: want unix:///path/to/socket", endpoint)
	}
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize), grpc.MaxCallSendMsgSize(maxMessageSize)),
	)
	if err != nil {
		return nil, fmt.Errorf("container runtime endpoint %s: %w", endpoint, err)
	}
	return &Client{
		RuntimeServiceClient: runtimeapi.NewRuntimeServiceClient(conn),
		ImageServiceClient:   runtimeapi.NewImageServiceClient(conn),
		conn:                 conn,
	}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// ExecSync runs cmd in a running container and waits at most timeout (0: no limit).
func (c *Client) ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int32, err error) {
	req := &runtimeapi.ExecSyncRequest{ContainerId: containerID, Cmd: cmd, Timeout: int64(timeout.Seconds())}
	if timeout > 0 {
		var cancel context.CancelFunc
		// The runtime enforces the timeout; the call gets a little more to report it.
		ctx, cancel = context.WithTimeout(ctx, timeout+2*time.Second)
		defer cancel()
	}
	resp, err := c.RuntimeServiceClient.ExecSync(ctx, req)
	if err != nil {
		return nil, nil, 0, err
	}
	return resp.Stdout, resp.Stderr, resp.ExitCode, nil
}
