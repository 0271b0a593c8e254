// Package certs is unitlet-certs: it keeps the node's certificates current. The client
// certificate that unitlet-config's TLS bootstrap wrote (kubelet-client-current.pem, which
// the kubeconfig points at) is renewed at a jittered 70 to 90% of its lifetime with the
// node's current credentials; with serverTLSBootstrap, a serving certificate for the node
// API (kubelet-server-current.pem, the hostname and node IPs as SANs) is requested and
// renewed the same way. Every client reloads the files by itself: nobody restarts. A
// kubeconfig with the certificate inline (kubeadm init's kubelet.conf) seeds an empty
// client store, as the kubelet does, and is rotated once the kubeconfig names the store's
// file (seed.go).
package certs

import (
	"context"
	"log/slog"

	"k8s.io/utils/clock"

	certsv1 "github.com/unitlet/unitlet/proto/unitlet/certs/v1"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/peercred"
	"github.com/unitlet/unitlet/shared/pki"
)

// ServiceName is unitlet-certs's name on the bus.
const ServiceName = "certs"

// Config is unitlet-certs's configuration: the process settings and the lifetime its
// CSRs ask for, from UNITLET_* variables. The node's configuration comes from
// unitlet-config over the bus.
type Config struct {
	daemon.Settings
	pki.LifetimeSettings
}

// Validate checks the settings.
func (c Config) Validate() error {
	if err := c.Settings.Validate(); err != nil {
		return err
	}
	return c.LifetimeSettings.Validate()
}

// Command is unitlet-certs's main.
func Command() daemon.Command[Config] {
	return daemon.Command[Config]{Service: ServiceName, About: "unitlet-certs rotates the node's client certificate before it expires and, with\nserverTLSBootstrap, requests and rotates the node API's serving certificate. It reads the\nnode's configuration from unitlet-config over the bus.", Run: Run}
}

// Run runs unitlet-certs until ctx ends or it fails.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	nc, err := nodeconfig.Get(ctx, cfg.SocketDir)
	if err != nil {
		return err
	}
	opts, rc, err := nodeOptions(ctx, nc, cfg.CertificateLifetime, clock.RealClock{}, log)
	if err != nil {
		return err
	}
	d := daemon.New(daemon.Options{Service: ServiceName, Settings: cfg.Settings, Logger: log})
	opts.Metrics = newMetrics(d.Registry())
	m := NewManager(opts)
	registerTTL(d.Registry(), m, opts.Clock.Now)
	certsv1.RegisterCertsServiceServer(d.Server(), NewServer(m))
	d.Authorizer().Allow("/"+certsv1.CertsService_ServiceDesc.ServiceName+"/Rotate", peercred.Root())
	d.SetHealthCheck(m.Healthy)

	// Rotation: one loop per certificate; each renews at its deadline, on Rotate, and
	// retries failures with backoff for as long as it takes.
	d.Go("rotate", m.Run)
	// Credentials: when kubelet.conf comes to name the store's file (kubeadm's
	// kubelet-finalize, after a seed), a restart rotates it; nothing to follow standalone.
	d.Go("credentials", kube.FollowClientCredentials(nc.Paths.GetKubeconfig(), rc, log))
	// A new configuration generation that changes what this service applies at start
	// restarts it (systemd starts it again); other generations are taken as they come.
	d.Go("configuration", nodeconfig.Follow(d, ServiceName, cfg.SocketDir, nc, nil, log))
	return d.Run(ctx)
}
