package pki

import (
	"fmt"
	"time"

	"github.com/unitlet/unitlet/shared/daemon"
)

// MinLifetime is the shortest lifetime a CSR may ask for: the API server refuses an
// expirationSeconds below 600.
const MinLifetime = 10 * time.Minute

// lifetimeSettings are the environment settings of the certificates a node requests.
type lifetimeSettings struct {
	// Lifetime asks the signer for this lifetime (the CSR's expirationSeconds). Empty
	// leaves it to the signer: the controller-manager's --cluster-signing-duration, a year
	// by default. The signer may shorten it, never lengthen it.
	Lifetime time.Duration `env:"CERTIFICATE_LIFETIME"`
}

// RequestedLifetime is the lifetime UNITLET_CERTIFICATE_LIFETIME asks for, 0 when unset.
// unitlet-config's TLS bootstrap and unitlet-certs's rotations both read it. environ
// overrides the process environment when not nil (tests).
func RequestedLifetime(environ map[string]string) (time.Duration, error) {
	var s lifetimeSettings
	if err := daemon.ParseEnv(&s, environ); err != nil {
		return 0, err
	}
	if s.Lifetime != 0 && s.Lifetime < MinLifetime {
		return 0, daemon.ConfigError(fmt.Errorf("environment: %sCERTIFICATE_LIFETIME=%s is shorter than %s, the shortest lifetime the API server accepts in a CSR",
			daemon.EnvPrefix, s.Lifetime, MinLifetime))
	}
	return s.Lifetime, nil
}
