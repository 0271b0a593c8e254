package config

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/kubeapi"
	"github.com/unitlet/unitlet/shared/pki"
)

// The pace of the TLS bootstrap.
const (
	// bootstrapCheckEvery is how often a usable kubeconfig is checked again.
	bootstrapCheckEvery = 30 * time.Second
	// A failed attempt is retried after bootstrapBackoffFirst, doubling to bootstrapBackoffCap.
	bootstrapBackoffFirst = 2 * time.Second
	bootstrapBackoffCap   = 64 * time.Second
	// bootstrapAttemptTimeout bounds the wait for one request's approval; a new request follows.
	bootstrapAttemptTimeout = 15 * time.Minute
)

// bootstrapComponent is the user agent's component: unitlet-config/<version>.
const bootstrapComponent = "unitlet-config"

// Bootstrapper gets the node its first client certificate (TLS bootstrap): while the
// kubeconfig is not usable and a bootstrap kubeconfig is configured, it asks the API
// server, with the bootstrap kubeconfig's credentials, for a certificate for
// system:node:<name>, stores it in the certificate directory and writes a kubeconfig that
// points at it. It checks again every 30 s, so an expired certificate is replaced, and
// backs off after a failure. unitlet-certs rotates the certificate afterwards.
type Bootstrapper struct {
	config    func() *configv1.NodeConfig
	log       *slog.Logger
	clock     clock.Clock
	jitter    func() float64 // in [0, 1)
	newClient func(*rest.Config) (kubeapi.Interface, error)
	timeout   time.Duration
	// lifetime is the certificate lifetime the CSR asks for; 0 leaves it to the signer.
	lifetime time.Duration
	// configured: a bootstrap kubeconfig is named (--bootstrap-kubeconfig); without one
	// the bootstrapper is off.
	configured bool

	attempts *prometheus.CounterVec

	mu     sync.Mutex // guards status
	status *configv1.BootstrapStatus
}

// NewBootstrapper bootstraps for the configuration config returns (its paths and node
// name), asking the signer for lifetime (0: the signer decides). Without a bootstrap
// kubeconfig it is off: its Run only waits for ctx to end.
func NewBootstrapper(config func() *configv1.NodeConfig, lifetime time.Duration, reg prometheus.Registerer, log *slog.Logger) *Bootstrapper {
	b := &Bootstrapper{
		config:     config,
		configured: config().GetPaths().GetBootstrapKubeconfig() != "",
		lifetime:   lifetime,
		log:        log.With("component", "tls-bootstrap"),
		clock:      clock.RealClock{},
		jitter:     rand.Float64,
		newClient:  func(rc *rest.Config) (kubeapi.Interface, error) { return kubeapi.NewForConfig(rc) },
		timeout:    bootstrapAttemptTimeout,
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "unitlet_config_bootstrap_attempts_total",
			Help: "TLS bootstrap attempts, by result (success, failure).",
		}, []string{"result"}),
		status: &configv1.BootstrapStatus{State: configv1.BootstrapState_BOOTSTRAP_STATE_NOT_CONFIGURED,
			Message: "no --bootstrap-kubeconfig: a missing kubeconfig means a standalone node"},
	}
	if b.configured {
		b.status = &configv1.BootstrapStatus{State: configv1.BootstrapState_BOOTSTRAP_STATE_BOOTSTRAPPING,
			Message: "checking the kubeconfig"}
	}
	if reg != nil {
		reg.MustRegister(b.attempts)
	}
	return b
}

// Status is a copy of the bootstrap's state.
func (b *Bootstrapper) Status() *configv1.BootstrapStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return proto.Clone(b.status).(*configv1.BootstrapStatus)
}

// Run bootstraps whenever the kubeconfig is not usable, until ctx ends; without a
// bootstrap kubeconfig it only waits for that.
func (b *Bootstrapper) Run(ctx context.Context) error {
	if !b.configured {
		<-ctx.Done()
		return ctx.Err()
	}
	backoff := bootstrapBackoffFirst
	for {
		wait := bootstrapCheckEvery
		if reason := b.check(); reason != nil {
			err := b.attempt(ctx, reason)
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case err != nil:
				// Jitter downwards so the cap holds and nodes that failed together spread out.
				wait = backoff - time.Duration(b.jitter()*float64(backoff)/4)
				backoff = min(2*backoff, bootstrapBackoffCap)
				b.failed(err, b.clock.Now().Add(wait))
			default:
				backoff = bootstrapBackoffFirst
			}
		}
		t := b.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
}

// check returns why the kubeconfig is not usable, or nil when it is.
func (b *Bootstrapper) check() error {
	kubeconfig := b.config().GetPaths().GetKubeconfig()
	notAfter, err := pki.CheckKubeconfig(kubeconfig, b.clock.Now())
	if err != nil {
		return err
	}
	b.mu.Lock()
	if !notAfter.IsZero() {
		b.status.CertificateNotAfter = timestamppb.New(notAfter)
	}
	done := b.status.State == configv1.BootstrapState_BOOTSTRAP_STATE_DONE
	b.mu.Unlock()
	if !done {
		b.transition(configv1.BootstrapState_BOOTSTRAP_STATE_NOT_NEEDED, fmt.Sprintf("the kubeconfig %s is usable", kubeconfig), nil)
	}
	return nil
}

// attempt requests a client certificate and writes it and the kubeconfig.
func (b *Bootstrapper) attempt(ctx context.Context, reason error) (err error) {
	cfg := b.config()
	paths, node := cfg.GetPaths(), cfg.GetNode().GetName()
	bootstrap, kubeconfig := paths.GetBootstrapKubeconfig(), paths.GetKubeconfig()
	b.transition(configv1.BootstrapState_BOOTSTRAP_STATE_BOOTSTRAPPING,
		fmt.Sprintf("requesting a client certificate for node %s: %v", node, reason),
		func(st *configv1.BootstrapStatus) {
			st.Attempts++
			st.CsrName, st.NextAttemptTime = "", nil
		})
	defer func() {
		if err != nil {
			b.attempts.WithLabelValues("failure").Inc()
		} else {
			b.attempts.WithLabelValues("success").Inc()
		}
	}()

	// Read the bootstrap kubeconfig afresh each time: an admin may have fixed it.
	if _, err := os.Stat(bootstrap); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the bootstrap kubeconfig %s does not exist: put the bootstrap credentials there, or fix --bootstrap-kubeconfig", bootstrap)
	}
	rc, err := kube.RESTConfig(bootstrap, bootstrapComponent, nil)
	if err != nil {
		return fmt.Errorf("read the bootstrap kubeconfig: %w: fix the file", err)
	}
	caData := rc.TLSClientConfig.CAData
	if len(caData) == 0 && rc.TLSClientConfig.CAFile != "" {
		if caData, err = os.ReadFile(rc.TLSClientConfig.CAFile); err != nil {
			return fmt.Errorf("read the CA of the bootstrap kubeconfig %s: %w", bootstrap, err)
		}
	}
	store := pki.Store{Dir: paths.GetCertDir(), Prefix: pki.ClientPrefix}
	if err := os.MkdirAll(store.Dir, 0o700); err != nil {
		return fmt.Errorf("make the certificate directory: %w", err)
	}
	if err := os.Chmod(store.Dir, 0o700); err != nil {
		return fmt.Errorf("restrict the certificate directory: %w", err)
	}

	// A certificate stored before a crash, or by unitlet-certs, needs only a kubeconfig.
	if leaf := b.reusable(store, node); leaf != nil {
		if err := pki.WriteKubeconfig(kubeconfig, rc.Host, caData, store.CurrentPath()); err != nil {
			return fmt.Errorf("write the kubeconfig %s: %w", kubeconfig, err)
		}
		b.done(fmt.Sprintf("wrote %s for the stored certificate %s", kubeconfig, store.CurrentPath()), "", leaf.NotAfter)
		return nil
	}

	client, err := b.newClient(rc)
	if err != nil {
		return fmt.Errorf("client for the bootstrap kubeconfig %s: %w", bootstrap, err)
	}
	req := pki.ClientRequest(node, b.lifetime)
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	name, uid, err := pki.Submit(actx, client, key, req)
	if err != nil {
		return explainBootstrapError(err, bootstrap, rc.Host)
	}
	b.transition(configv1.BootstrapState_BOOTSTRAP_STATE_WAITING_FOR_APPROVAL,
		fmt.Sprintf("submitted CSR %s for system:node:%s, waiting for its approval and certificate", name, node),
		func(st *configv1.BootstrapStatus) { st.CsrName = name })
	certPEM, err := pki.WaitForCertificate(actx, client, name, types.UID(uid))
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case actx.Err() != nil:
		return fmt.Errorf("CSR %s got no certificate within %s: approve it (kubectl certificate approve %s), or check that kube-controller-manager runs and auto-approves node client CSRs for the bootstrap token's group; a new request follows",
			name, b.timeout, name)
	case err != nil:
		return fmt.Errorf("CSR %s: %w; a new request follows", name, err)
	}
	leaf, err := pki.Verify(certPEM, key, req, b.clock.Now())
	if err != nil {
		return fmt.Errorf("refused the certificate issued for CSR %s: %w", name, err)
	}
	if _, err := store.Update(certPEM, keyPEM, b.clock.Now()); err != nil {
		return fmt.Errorf("store the client certificate in %s: %w", store.Dir, err)
	}
	if err := pki.WriteKubeconfig(kubeconfig, rc.Host, caData, store.CurrentPath()); err != nil {
		return fmt.Errorf("write the kubeconfig %s: %w", kubeconfig, err)
	}
	b.done(fmt.Sprintf("CSR %s issued; wrote %s for %s", name, kubeconfig, store.CurrentPath()), name, leaf.NotAfter)
	return nil
}

// reusable is the store's current certificate when it is still valid and is node's.
func (b *Bootstrapper) reusable(store pki.Store, node string) *x509.Certificate {
	cert, err := store.Current()
	if err != nil {
		return nil
	}
	leaf := cert.Leaf
	if leaf == nil || leaf.Subject.CommonName != "system:node:"+node || !b.clock.Now().Before(leaf.NotAfter) {
		return nil
	}
	return leaf
}

func (b *Bootstrapper) done(msg, csrName string, notAfter time.Time) {
	b.transition(configv1.BootstrapState_BOOTSTRAP_STATE_DONE, msg, func(st *configv1.BootstrapStatus) {
		st.LastError, st.NextAttemptTime = "", nil
		st.CsrName = csrName
		st.CertificateNotAfter = timestamppb.New(notAfter)
	})
}

func (b *Bootstrapper) failed(err error, next time.Time) {
	b.transition(configv1.BootstrapState_BOOTSTRAP_STATE_FAILED,
		fmt.Sprintf("attempt failed; retrying at %s", next.UTC().Format(time.RFC3339)),
		func(st *configv1.BootstrapStatus) {
			st.LastError = err.Error()
			st.NextAttemptTime = timestamppb.New(next)
		})
}

// transition sets the state and message; a change of state is logged, once.
func (b *Bootstrapper) transition(state configv1.BootstrapState, msg string, edit func(*configv1.BootstrapStatus)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	changed := b.status.State != state
	b.status.State, b.status.Message = state, msg
	if edit != nil {
		edit(b.status)
	}
	if !changed {
		return
	}
	b.status.LastTransitionTime = timestamppb.New(b.clock.Now())
	attrs := []any{"state", stateName(state), "message", msg, "attempts", b.status.Attempts}
	if state == configv1.BootstrapState_BOOTSTRAP_STATE_FAILED {
		b.log.Error("TLS bootstrap failed", append(attrs, "err", b.status.LastError, "retry_at", b.status.NextAttemptTime.AsTime())...)
		return
	}
	b.log.Info("TLS bootstrap", attrs...)
}

// stateName is the state without its enum prefix, lower case: "waiting_for_approval".
func stateName(s configv1.BootstrapState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "BOOTSTRAP_STATE_"))
}

// explainBootstrapError says what an error while submitting the CSR means and what to do.
// client-go keeps the API server's status but flattens transport errors to text.
func explainBootstrapError(err error, bootstrap, server string) error {
	var status apierrors.APIStatus
	switch {
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("the bootstrap token in %s was refused (401 Unauthorized): check the token's id and secret, and that its Secret in kube-system has not expired", bootstrap)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the bootstrap credentials in %s may not create certificate signing requests (%v): bind the token's group (system:bootstrappers) to the ClusterRole system:node-bootstrapper", bootstrap, err)
	case errors.As(err, &status):
		return fmt.Errorf("request a client certificate from %s with %s: %w", server, bootstrap, err)
	case strings.Contains(err.Error(), "x509:") || strings.Contains(err.Error(), "tls:"):
		return fmt.Errorf("TLS with the API server %s failed (%v): check that certificate-authority-data in %s is the cluster's CA", server, err, bootstrap)
	}
	return fmt.Errorf("cannot reach the API server %s named in %s (%v): check the server address, that the API server runs, and the network", server, bootstrap, err)
}
