package nodeapi

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Names of the self-signed serving certificate and key in the certificate directory, as
// the kubelet names them.
const (
	selfSignedCertName = "kubelet.crt"
	selfSignedKeyName  = "kubelet.key"
)

// servingCertificate loads the configured certificate, or else the self-signed one kept in
// certDir, making it (for hostname and ips, valid a year) when it is missing, unreadable or
// expired. A certificate kept from an earlier run is reused, so clients that pinned it keep
// working across restarts.
func servingCertificate(log *slog.Logger, certFile, keyFile, certDir, hostname string, ips []string, now time.Time) (tls.Certificate, error) {
	if certFile != "" || keyFile != "" {
		if certFile == "" || keyFile == "" {
			return tls.Certificate{}, errors.New("tlsCertFile and tlsPrivateKeyFile must be set together")
		}
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("load serving certificate %s: %w", certFile, err)
		}
		return cert, nil
	}
	if certDir == "" {
		return tls.Certificate{}, errors.New("no serving certificate configured and no certificate directory to keep a self-signed one")
	}
	certPath := filepath.Join(certDir, selfSignedCertName)
	keyPath := filepath.Join(certDir, selfSignedKeyName)
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	switch {
	case err == nil && now.Before(cert.Leaf.NotAfter):
		return cert, nil
	case err == nil:
		log.Info("self-signed serving certificate expired; making a new one", "path", certPath, "notAfter", cert.Leaf.NotAfter)
	case !errors.Is(err, os.ErrNotExist):
		log.Warn("self-signed serving certificate unusable; making a new one", "path", certPath, "err", err)
	}

	if hostname == "" {
		return tls.Certificate{}, errors.New("make self-signed serving certificate: no hostname")
	}
	var alternateIPs []net.IP
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return tls.Certificate{}, fmt.Errorf("make self-signed serving certificate: bad IP %q", s)
		}
		alternateIPs = append(alternateIPs, ip)
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(hostname, alternateIPs, nil)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("make self-signed serving certificate: %w", err)
	}
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return tls.Certificate{}, fmt.Errorf("create certificate directory: %w", err)
	}
	if err := keyutil.WriteKey(keyPath, keyPEM); err != nil {
		return tls.Certificate{}, fmt.Errorf("write self-signed serving key: %w", err)
	}
	if err := certutil.WriteCert(certPath, certPEM); err != nil {
		return tls.Certificate{}, fmt.Errorf("write self-signed serving certificate: %w", err)
	}
	cert, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("load self-signed serving certificate: %w", err)
	}
	log.Info("made self-signed serving certificate", "path", certPath, "hostname", hostname, "ips", ips)
	return cert, nil
}
