package pki

import (
	"fmt"
	"time"
)

// MinLifetime is the shortest lifetime a CSR may ask for: the API server refuses an
// expirationSeconds below 600.
const MinLifetime = 10 * time.Minute

// LifetimeSettings are the environment settings of the certificates a node requests, read
// by unitlet-config (TLS bootstrap) and unitlet-certs (rotations) as part of their own.
type LifetimeSettings struct {
	// CertificateLifetime asks the signer for this lifetime (the CSR's expirationSeconds).
	// Zero leaves it to the signer: the controller-manager's --cluster-signing-duration, a
	// year by default. The signer may shorten it, never lengthen it.
	CertificateLifetime time.Duration `env:"CERTIFICATE_LIFETIME"`
}

// Validate refuses a lifetime the API server would refuse.
func (s LifetimeSettings) Validate() error {
	if s.CertificateLifetime != 0 && s.CertificateLifetime < MinLifetime {
		return fmt.Errorf("environment: UNITLET_CERTIFICATE_LIFETIME=%s is shorter than %s, the shortest lifetime the API server accepts in a CSR",
			s.CertificateLifetime, MinLifetime)
	}
	return nil
}
