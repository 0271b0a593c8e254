package config

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/peercred"
	"github.com/unitlet/unitlet/shared/watch"
)

// Server is the bus API of unitlet-config.
type Server struct {
	configv1.UnimplementedConfigServiceServer
	svc       *Service
	bootstrap *Bootstrapper
}

// NewServer serves svc and the state of its TLS bootstrap over the bus.
func NewServer(svc *Service, bootstrap *Bootstrapper) *Server {
	return &Server{svc: svc, bootstrap: bootstrap}
}

// GetConfig returns the configuration in effect.
func (s *Server) GetConfig(ctx context.Context, _ *configv1.GetConfigRequest) (*configv1.GetConfigResponse, error) {
	c, err := forCaller(ctx, s.svc.Current())
	if err != nil {
		return nil, err
	}
	return &configv1.GetConfigResponse{Config: c}, nil
}

// forCaller is c for root, and a copy with the configuration's secrets redacted for
// anyone else (the unitlet group's members reading it with unitletctl).
func forCaller(ctx context.Context, c *configv1.NodeConfig) (*configv1.NodeConfig, error) {
	if who, ok := peercred.FromContext(ctx); ok && who.UID == 0 {
		return c, nil
	}
	red, err := nodeconfig.Redact(c.GetKubeletConfiguration())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "redact the configuration: %v", err)
	}
	out := proto.Clone(c).(*configv1.NodeConfig)
	out.KubeletConfiguration = red
	return out, nil
}

// GetReloadStatus returns the result of the last load.
func (s *Server) GetReloadStatus(context.Context, *configv1.GetReloadStatusRequest) (*configv1.GetReloadStatusResponse, error) {
	return &configv1.GetReloadStatusResponse{Status: s.svc.Status()}, nil
}

// GetBootstrapStatus returns the state of the TLS bootstrap.
func (s *Server) GetBootstrapStatus(context.Context, *configv1.GetBootstrapStatusRequest) (*configv1.GetBootstrapStatusResponse, error) {
	return &configv1.GetBootstrapStatusResponse{Status: s.bootstrap.Status()}, nil
}

// WatchConfig streams the configuration in effect unless the caller has it, then every
// new generation.
func (s *Server) WatchConfig(req *configv1.WatchConfigRequest, stream configv1.ConfigService_WatchConfigServer) error {
	sub := s.svc.Subscribe(req.GetAfterGeneration())
	return watch.Serve(stream.Context(), sub, func(ev watch.Event[*configv1.NodeConfig]) error {
		c, err := forCaller(stream.Context(), ev.Value)
		if err != nil {
			return err
		}
		return stream.Send(&configv1.WatchConfigResponse{Config: c})
	})
}
