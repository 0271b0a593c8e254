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
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// maxMessageSize is the largest CRI message accepted, as the kubelet's (16 MiB): lists of
// many containers are big.
const maxMessageSize = 16 << 20

// Client is the runtime and image services of one CRI endpoint.
type Client struct {
	runtimeapi.RuntimeServiceClient
	runtimeapi.ImageServiceClient
	conn, imageConn *grpc.ClientConn
}

// Option changes how Dial connects.
type Option func(*options)

type options struct {
	imageEndpoint string
	timeout       time.Duration
	metrics       *operationMetrics
}

// ImageEndpoint serves the image service from another endpoint (kubelet config
// imageServiceEndpoint); empty keeps the runtime's.
func ImageEndpoint(endpoint string) Option { return func(o *options) { o.imageEndpoint = endpoint } }

// RequestTimeout bounds each call as the kubelet's runtimeRequestTimeout does (see
// callTimeout); zero leaves calls to their contexts.
func RequestTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// FromConfig are the options the kubelet configuration sets: imageServiceEndpoint and
// runtimeRequestTimeout.
func FromConfig(kc *kubeletconfigv1beta1.KubeletConfiguration) []Option {
	return []Option{ImageEndpoint(kc.ImageServiceEndpoint), RequestTimeout(kc.RuntimeRequestTimeout.Duration)}
}

// Dial connects to a CRI endpoint, "unix:///run/containerd/containerd.sock" or a socket
// path. The connection is made lazily and re-made after the runtime restarts.
func Dial(endpoint string, opts ...Option) (*Client, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	conn, err := dial(endpoint, o)
	if err != nil {
		return nil, fmt.Errorf("container runtime endpoint %s: %w", endpoint, err)
	}
	c := &Client{
		RuntimeServiceClient: runtimeapi.NewRuntimeServiceClient(conn),
		ImageServiceClient:   runtimeapi.NewImageServiceClient(conn),
		conn:                 conn,
	}
	if o.imageEndpoint != "" && o.imageEndpoint != endpoint {
		img, err := dial(o.imageEndpoint, o)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("image service endpoint %s: %w", o.imageEndpoint, err)
		}
		c.ImageServiceClient, c.imageConn = runtimeapi.NewImageServiceClient(img), img
	}
	return c, nil
}

func dial(endpoint string, o options) (*grpc.ClientConn, error) {
	path := strings.TrimPrefix(endpoint, "unix://")
	if path == "" || !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("%q: want unix:///path/to/socket", endpoint)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize), grpc.MaxCallSendMsgSize(maxMessageSize)),
	}
	var unary []grpc.UnaryClientInterceptor
	if o.metrics != nil {
		unary = append(unary, o.metrics.unary)
		opts = append(opts, grpc.WithStreamInterceptor(o.metrics.stream))
	}
	if timeout := o.timeout; timeout > 0 {
		unary = append(unary, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if d := callTimeout(req, timeout); d > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})
	}
	opts = append(opts, grpc.WithChainUnaryInterceptor(unary...))
	return grpc.NewClient("unix://"+path, opts...)
}

// callTimeout is how long a unary CRI call may take, as the kubelet bounds its calls with
// runtimeRequestTimeout: an image pull has no bound, a sandbox start twice the timeout, a
// container stop and an exec the timeout on top of their own; 0 is no bound.
func callTimeout(req any, timeout time.Duration) time.Duration {
	switch r := req.(type) {
	case *runtimeapi.PullImageRequest:
		return 0
	case *runtimeapi.RunPodSandboxRequest:
		return 2 * timeout
	case *runtimeapi.StopContainerRequest:
		return timeout + time.Duration(r.GetTimeout())*time.Second
	case *runtimeapi.ExecSyncRequest:
		if r.GetTimeout() <= 0 {
			return 0
		}
		return timeout + time.Duration(r.GetTimeout())*time.Second
	}
	return timeout
}

// Close closes the connections.
func (c *Client) Close() error {
	if c.imageConn != nil {
		c.imageConn.Close()
	}
	return c.conn.Close()
}

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
