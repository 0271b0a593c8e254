package nodeapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"
)

// ServeHealthz serves /healthz over plain HTTP on l (the kubelet's healthzBindAddress and
// healthzPort, 127.0.0.1:10248 by default) with the node API's checks, until ctx ends.
// Nothing else is served there: it carries no secret, as the kubelet's.
func (s *Server) ServeHealthz(ctx context.Context, l net.Listener) error {
	mux := http.NewServeMux()
	healthz.InstallHandler(mux, s.healthChecks()...)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	s.log.Info("serving /healthz", "address", l.Addr().String())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return nil
	}
}
