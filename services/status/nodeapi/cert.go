package nodeapi

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/unitlet/unitlet/shared/pki"
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

// rotatingCertificate serves unitlet-certs's current serving certificate
// (kubelet-server-current.pem in the certificate directory), looking again at most once a
// second, so a rotation is served from the next handshake on without a restart. Until the
// first one is issued, and whenever the file cannot be read, it serves fallback (the
// self-signed certificate).
type rotatingCertificate struct {
	store    pki.Store
	fallback *tls.Certificate
	log      *slog.Logger

	mu      sync.Mutex
	current *tls.Certificate
	checked time.Time
	lastErr string
}

func (r *rotatingCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= time.Second {
		r.checked = now
		cert, err := r.store.Current()
		switch {
		case err == nil && (r.current == nil || !bytes.Equal(cert.Certificate[0], r.current.Certificate[0])):
			r.log.Info("serving the certificate from unitlet-certs", "path", r.store.CurrentPath(),
				"serial", cert.Leaf.SerialNumber.String(), "notAfter", cert.Leaf.NotAfter)
			r.current, r.lastErr = cert, ""
		case err != nil && err.Error() != r.lastErr:
			r.lastErr = err.Error()
			if r.current == nil {
				r.log.Info("no serving certificate from unitlet-certs yet; serving the self-signed one", "reason", err)
			} else {
				r.log.Warn("cannot read the serving certificate; serving the last one read", "err", err)
			}
		}
	}
	if r.current != nil {
		return r.current, nil
	}
	return r.fallback, nil
}
