package certs

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/pki"
)

// nodeOptions are the manager's options for the node's configuration nc, and the REST
// configuration of its client (nil when standalone). It waits for TLS bootstrap's
// kubeconfig, and then decides what is rotated:
//
//   - no kubeconfig (a standalone node): nothing; Options.Standalone says why;
//   - a kubeconfig with the client certificate inline (kubeadm init's kubelet.conf): it
//     seeds an empty client store first, as the kubelet does (seed.go);
//   - a kubeconfig whose credentials are not the store's certificate: they are not
//     rotated; Options.ClientCredentials says why.
//
// The certificates are kept in --cert-dir, else <root-dir>/pki; each CSR asks for
// lifetime (0: the signer decides). Metrics are the caller's to set.
func nodeOptions(ctx context.Context, nc *nodeconfig.Config, lifetime time.Duration, clk clock.Clock, log *slog.Logger) (Options, *rest.Config, error) {
	kc := nc.KubeletConfiguration
	if err := kube.WaitForKubeconfig(ctx, nc.Paths, log); err != nil {
		return Options{}, nil, err
	}
	certDir := nc.Paths.GetCertDir()
	if certDir == "" {
		certDir = filepath.Join(nc.Paths.GetRootDir(), "pki")
	}
	opts := Options{CertDir: certDir, Node: nc.Identity(), Serving: kc.ServerTLSBootstrap, Lifetime: lifetime, Clock: clk, Logger: log}
	kube.FollowRotatedCertificates()
	client, rc, err := kube.Client(nc.Paths.GetKubeconfig(), "unitlet-certs", kc)
	switch {
	case errors.Is(err, kube.ErrStandalone):
		log.Info("running standalone: no certificate to rotate", "reason", err)
		opts.Standalone = err.Error()
		return opts, nil, nil
	case err != nil:
		return Options{}, nil, daemon.ConfigError(err)
	}
	opts.Client = client
	store := pki.Store{Dir: certDir, Prefix: pki.ClientPrefix}
	seeded, err := seedClientStore(store, rc.TLSClientConfig, clk.Now())
	if err != nil {
		return Options{}, nil, err
	}
	if seeded != "" {
		log.Info("seeded the client certificate store with the kubeconfig's inline certificate, as the kubelet does: once the kubeconfig names it, it is rotated",
			"kubeconfig", nc.Paths.GetKubeconfig(), "file", seeded, "current", store.CurrentPath())
	}
	opts.ClientCredentials = otherCredentials(rc, store.CurrentPath())
	if opts.ClientCredentials != "" {
		log.Info("the client certificate is not rotated", "reason", opts.ClientCredentials)
	}
	return opts, rc, nil
}
