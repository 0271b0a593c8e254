package bus

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

// PodLister is podsync's ListPodsStream, and ListPods for a podsync that predates it.
type PodLister interface {
	ListPodsStream(ctx context.Context, req *podsyncv1.ListPodsStreamRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[podsyncv1.ListPodsStreamResponse], error)
	ListPods(ctx context.Context, req *podsyncv1.ListPodsRequest, opts ...grpc.CallOption) (*podsyncv1.ListPodsResponse, error)
}

// ListPods is every pod podsync has: all the parts of ListPodsStream (no message grows
// with the node's pods), or ListPods when podsync predates ListPodsStream. A list is
// whole or an error: a stream that breaks before its end is an error, never the pods it
// brought so far.
func ListPods(ctx context.Context, l PodLister) ([]*podsyncv1.Pod, error) {
	stream, err := l.ListPodsStream(ctx, &podsyncv1.ListPodsStreamRequest{})
	var pods []*podsyncv1.Pod
	for err == nil {
		var part *podsyncv1.ListPodsStreamResponse
		if part, err = stream.Recv(); err == nil {
			pods = append(pods, part.GetPods()...)
		}
	}
	switch {
	case errors.Is(err, io.EOF):
		return pods, nil
	case grpcstatus.Code(err) == codes.Unimplemented:
		resp, err := l.ListPods(ctx, &podsyncv1.ListPodsRequest{})
		if err != nil {
			return nil, err
		}
		return resp.GetPods(), nil
	}
	return nil, err
}
