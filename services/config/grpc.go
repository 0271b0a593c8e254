package config

import (
	"context"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
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
func (s *Server) GetConfig(context.Context, *configv1.GetConfigRequest) (*configv1.GetConfigResponse, error) {
	return &configv1.GetConfigResponse{Config: s.svc.Current()}, nil
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
		return stream.Send(&configv1.WatchConfigResponse{Config: ev.Value})
	})
}
