package csi

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// checkEndpoint refuses a driver endpoint that is not a Unix socket owned by root: the
// driver is handed volumes and pods' tokens. Stricter than the kubelet, which dials what
// the registration names.
func checkEndpoint(endpoint string) (string, error) {
	path := strings.TrimPrefix(endpoint, "unix://")
	fi, err := os.Lstat(path)
	if err != nil {
		return "", fmt.Errorf("endpoint %s: %w", endpoint, err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return "", fmt.Errorf("endpoint %s is not a Unix socket (%s)", endpoint, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 {
		return "", fmt.Errorf("endpoint %s is not owned by root: a driver's socket must be root's", endpoint)
	}
	return path, nil
}

// dial connects to a driver's endpoint (a Unix socket path, with or without unix://).
func dial(endpoint string) (*grpc.ClientConn, error) {
	path, err := checkEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	return grpc.NewClient("passthrough:///"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}))
}

// nodeGetInfo asks the driver at endpoint for its node information.
func nodeGetInfo(ctx context.Context, endpoint string) (NodeInfoReply, error) {
	conn, err := dial(endpoint)
	if err != nil {
		return NodeInfoReply{}, err
	}
	defer conn.Close()
	res, err := csipb.NewNodeClient(conn).NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		return NodeInfoReply{}, err
	}
	out := NodeInfoReply{NodeID: res.GetNodeId(), MaxVolumesPerNode: res.GetMaxVolumesPerNode()}
	if t := res.GetAccessibleTopology(); t != nil {
		out.AccessibleTopology = t.GetSegments()
	}
	return out, nil
}
