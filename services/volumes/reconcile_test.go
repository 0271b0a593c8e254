package volumes

import (
	"context"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

// fakeLister serves ListPodsStream from parts, then ends with end (io.EOF: the whole
// list); ListPods answers all at once.
type fakeLister struct {
	parts [][]*podsyncv1.Pod
	end   error
	all   []*podsyncv1.Pod
}

func (f *fakeLister) ListPodsStream(context.Context, *podsyncv1.ListPodsStreamRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[podsyncv1.ListPodsStreamResponse], error) {
	return &fakeListStream{parts: f.parts, end: f.end}, nil
}

func (f *fakeLister) ListPods(context.Context, *podsyncv1.ListPodsRequest, ...grpc.CallOption) (*podsyncv1.ListPodsResponse, error) {
	return &podsyncv1.ListPodsResponse{Pods: f.all}, nil
}

type fakeListStream struct {
	grpc.ClientStream
	parts [][]*podsyncv1.Pod
	end   error
}

func (s *fakeListStream) Recv() (*podsyncv1.ListPodsStreamResponse, error) {
	if len(s.parts) == 0 {
		return nil, s.end
	}
	m := &podsyncv1.ListPodsStreamResponse{Pods: s.parts[0]}
	s.parts = s.parts[1:]
	return m, nil
}

// TestListPodsIsWholeOrAnError: the reconciler's list is every part of ListPodsStream, or
// ListPods from a podsync that predates it; a stream that breaks between parts is an
// error, never the pods it brought so far (the others would look like orphans).
func TestListPodsIsWholeOrAnError(t *testing.T) {
	a, b, c := &podsyncv1.Pod{Uid: "a"}, &podsyncv1.Pod{Uid: "b"}, &podsyncv1.Pod{Uid: "c"}
	parts := [][]*podsyncv1.Pod{{a, b}, {c}}
	for _, tc := range []struct {
		name    string
		lister  *fakeLister
		want    int
		wantErr bool
	}{
		{"every part", &fakeLister{parts: parts, end: io.EOF}, 3, false},
		{"an older podsync", &fakeLister{end: grpcstatus.Error(codes.Unimplemented, "unknown method ListPodsStream"), all: []*podsyncv1.Pod{a, b, c}}, 3, false},
		{"broken between parts", &fakeLister{parts: parts, end: grpcstatus.Error(codes.Unavailable, "connection reset")}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods, err := listPods(context.Background(), tc.lister)
			if (err != nil) != tc.wantErr || len(pods) != tc.want {
				t.Fatalf("%d pods, %v; want %d (error %v)", len(pods), err, tc.want, tc.wantErr)
			}
		})
	}
}
