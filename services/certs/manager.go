package certs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/shared/kubeapi"
	"github.com/unitlet/unitlet/shared/nodeinfo"
	"github.com/unitlet/unitlet/shared/pki"
	"github.com/unitlet/unitlet/shared/watch"
)

// ErrUnknownKind is Rotate's answer for a kind the manager does not have.
var ErrUnknownKind = errors.New("unknown certificate kind")

// Options are what a Manager rotates and how.
type Options struct {
	// CertDir is the certificate directory (--cert-dir).
	CertDir string
	// Node is the node's identity: the subject and the serving certificate's SANs.
	Node nodeinfo.Identity
	// Client makes the CSRs with the node's current credentials; nil on a standalone node.
	Client kubeapi.Interface
	// Standalone, when set, says why there is no client.
	Standalone string
	// ClientCredentials, when set, says why the kubeconfig's credentials are not the
	// client store's (inline data, a token, another file): they are not rotated.
	ClientCredentials string
	// Serving requests and rotates a serving certificate (serverTLSBootstrap).
	Serving bool
	// Lifetime is the lifetime each CSR asks for (UNITLET_CERTIFICATE_LIFETIME); 0 leaves
	// it to the signer.
	Lifetime time.Duration

	Clock   clock.Clock
	Random  func() float64
	Logger  *slog.Logger
	Metrics *metrics
}

// Manager keeps the node's certificates current and publishes their states.
type Manager struct {
	rotators []*rotator
	hub      *watch.Hub[[]Certificate]
	clock    clock.Clock

	// publishMu orders publications: each publishes the list read under it.
	publishMu sync.Mutex
	last      []Certificate // the newest published list; the hub's snapshot
}

// NewManager returns a manager for the client certificate and, with o.Serving, the
// serving certificate.
func NewManager(o Options) *Manager {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Random == nil {
		o.Random = rand.Float64
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	m := &Manager{clock: o.Clock}
	// Every event is the whole list, so nothing needs replaying: a subscriber gets the
	// newest list, then each change.
	m.hub = watch.NewHub(1, 0, func() []Certificate { return m.last })
	name := o.Node.Name
	hostname := o.Node.Hostname
	if hostname == "" {
		hostname = name
	}
	var ips []net.IP
	for _, s := range o.Node.IPs {
		if ip := net.ParseIP(s); ip != nil {
			ips = append(ips, ip)
		}
	}
	var mk, ms rotatorMetrics
	if o.Metrics != nil {
		mk, ms = o.Metrics.forKind(KindClient), o.Metrics.forKind(KindServing)
	}
	client := &rotator{
		kind:      KindClient,
		store:     pki.Store{Dir: o.CertDir, Prefix: pki.ClientPrefix},
		marker:    filepath.Join(o.CertDir, ".rotate-client"),
		request:   pki.ClientRequest(name, o.Lifetime),
		client:    o.Client,
		missingOK: true,
		metrics:   mk,
	}
	serving := &rotator{
		kind:         KindServing,
		store:        pki.Store{Dir: o.CertDir, Prefix: pki.ServerPrefix},
		marker:       filepath.Join(o.CertDir, ".rotate-serving"),
		request:      pki.ServingRequest(name, []string{hostname}, ips, o.Lifetime),
		client:       o.Client,
		checkRequest: true,
		metrics:      ms,
	}
	switch {
	case o.Client == nil:
		client.disabled = "standalone: " + o.Standalone + "; nothing to rotate"
		serving.disabled = client.disabled
	case o.ClientCredentials != "":
		client.disabled = "not rotated: " + o.ClientCredentials + "; rotating those credentials is the administrator's business"
	}
	if o.Client != nil && !o.Serving {
		serving.disabled = "not requested: serverTLSBootstrap is false (unitlet-status serves its own certificate)"
	}
	for _, r := range []*rotator{client, serving} {
		r.clock, r.random = o.Clock, o.Random
		r.log = o.Logger.With("component", r.kind.String())
		r.published = m.publish
		r.init()
		m.rotators = append(m.rotators, r)
	}
	m.last = m.List()
	return m
}

// Run rotates every certificate until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(m.rotators))
	for i, r := range m.rotators {
		wg.Go(func() { errs[i] = r.run(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// List returns every certificate with its state, the client first.
func (m *Manager) List() []Certificate {
	out := make([]Certificate, 0, len(m.rotators))
	for _, r := range m.rotators {
		out = append(out, r.snapshot())
	}
	return out
}

// Subscribe returns a feed whose first event is the whole list, then one per change. The
// caller closes it.
func (m *Manager) Subscribe() *watch.Subscription[[]Certificate] { return m.hub.Subscribe(0) }

func (m *Manager) publish() {
	m.publishMu.Lock()
	defer m.publishMu.Unlock()
	list := m.List()
	m.hub.Publish(func(uint64) []Certificate {
		m.last = list
		return list
	})
}

// Rotate forces a rotation of kind and waits until the new certificate is installed.
func (m *Manager) Rotate(ctx context.Context, kind Kind) (Certificate, error) {
	for _, r := range m.rotators {
		if r.kind == kind {
			return r.Rotate(ctx)
		}
	}
	return Certificate{}, fmt.Errorf("%w: %s", ErrUnknownKind, kind)
}

// Healthy fails only when a rotation loop is stuck; an unreachable API server or a CSR
// nobody approves is a state, not ill health.
func (m *Manager) Healthy(context.Context) error {
	now := m.clock.Now()
	var errs []error
	for _, r := range m.rotators {
		errs = append(errs, r.stuck(now))
	}
	return errors.Join(errs...)
}
