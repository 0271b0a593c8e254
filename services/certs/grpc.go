package certs

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	certsv1 "github.com/unitlet/unitlet/proto/unitlet/certs/v1"
	"github.com/unitlet/unitlet/shared/watch"
)

// Server is the bus API of unitlet-certs.
type Server struct {
	certsv1.UnimplementedCertsServiceServer
	m *Manager
}

// NewServer serves m over the bus.
func NewServer(m *Manager) *Server { return &Server{m: m} }

// ListCertificates returns each certificate with its state.
func (s *Server) ListCertificates(context.Context, *certsv1.ListCertificatesRequest) (*certsv1.ListCertificatesResponse, error) {
	return &certsv1.ListCertificatesResponse{Certificates: toProtoList(s.m.List())}, nil
}

// WatchCertificates streams the list, then the list again on every change.
func (s *Server) WatchCertificates(_ *certsv1.WatchCertificatesRequest, stream certsv1.CertsService_WatchCertificatesServer) error {
	return watch.Serve(stream.Context(), s.m.Subscribe(), func(ev watch.Event[[]Certificate]) error {
		return stream.Send(&certsv1.WatchCertificatesResponse{Sequence: ev.Seq, Certificates: toProtoList(ev.Value)})
	})
}

// Rotate forces a rotation and returns the new certificate.
func (s *Server) Rotate(ctx context.Context, req *certsv1.RotateRequest) (*certsv1.RotateResponse, error) {
	var kind Kind
	switch req.GetKind() {
	case certsv1.CertificateKind_CERTIFICATE_KIND_CLIENT:
		kind = KindClient
	case certsv1.CertificateKind_CERTIFICATE_KIND_SERVING:
		kind = KindServing
	default:
		return nil, status.Error(codes.InvalidArgument, "kind: CLIENT or SERVING")
	}
	c, err := s.m.Rotate(ctx, kind)
	switch {
	case errors.Is(err, ErrNotRotating), errors.Is(err, ErrUnknownKind):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return nil, status.Error(codes.DeadlineExceeded, "the rotation goes on: "+err.Error())
	case errors.Is(err, context.Canceled):
		return nil, status.Error(codes.Canceled, "the rotation goes on: "+err.Error())
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &certsv1.RotateResponse{Certificate: toProto(c)}, nil
}

func toProtoList(cs []Certificate) []*certsv1.Certificate {
	out := make([]*certsv1.Certificate, 0, len(cs))
	for _, c := range cs {
		out = append(out, toProto(c))
	}
	return out
}

func toProto(c Certificate) *certsv1.Certificate {
	out := &certsv1.Certificate{Path: c.Path, State: c.State, Failures: uint32(c.Failures)}
	switch c.Kind {
	case KindClient:
		out.Kind = certsv1.CertificateKind_CERTIFICATE_KIND_CLIENT
	case KindServing:
		out.Kind = certsv1.CertificateKind_CERTIFICATE_KIND_SERVING
	}
	if !c.NextRotation.IsZero() {
		out.NextRotation = timestamppb.New(c.NextRotation)
	}
	if !c.LastRotation.IsZero() {
		out.LastRotation = timestamppb.New(c.LastRotation)
	}
	if l := c.Leaf; l != nil {
		out.Subject, out.Issuer, out.Serial = l.Subject.String(), l.Issuer.String(), l.SerialNumber.String()
		out.DnsNames = l.DNSNames
		for _, ip := range l.IPAddresses {
			out.Ips = append(out.Ips, ip.String())
		}
		out.NotBefore, out.NotAfter = timestamppb.New(l.NotBefore), timestamppb.New(l.NotAfter)
	}
	return out
}
