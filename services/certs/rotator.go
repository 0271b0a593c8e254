package certs

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/shared/checkpoint"
	"github.com/unitlet/unitlet/shared/kubeapi"
	"github.com/unitlet/unitlet/shared/pki"
)

// Kind is which of the node's certificates a rotator keeps.
type Kind int

const (
	// KindClient is the client certificate of the node's kubeconfig.
	KindClient Kind = iota + 1
	// KindServing is the node API's serving certificate.
	KindServing
)

func (k Kind) String() string {
	switch k {
	case KindClient:
		return "client"
	case KindServing:
		return "serving"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

const (
	// keepFiles is how many replaced certificate files a store keeps besides the current.
	keepFiles = 5
	// attemptTimeout bounds one rotation: a CSR not approved and issued by then is given up
	// and a new one made after the backoff, as client-go's certificate manager does.
	attemptTimeout = 15 * time.Minute
	// recheckEvery is the longest the loop sleeps: it looks at the store again (a
	// certificate bootstrapped, or replaced by hand) and shows it is alive.
	recheckEvery = time.Minute
)

// Errors of Rotate, for the cases where there is nothing to rotate.
var (
	ErrNotRotating = errors.New("nothing to rotate")
)

// Certificate is one kind of certificate as a rotator sees it.
type Certificate struct {
	Kind Kind
	// Path is the store's current link.
	Path string
	// Leaf is the certificate in use; nil when there is none.
	Leaf *x509.Certificate
	// NextRotation is the jittered deadline or the next retry; zero when none is planned.
	NextRotation time.Time
	// State is one line of what the rotator is doing.
	State string
	// Failures counts failed attempts since the last successful rotation.
	Failures int
	// LastRotation is when the certificate in use was installed; zero when unknown.
	LastRotation time.Time
}

// rotatorMetrics are a rotator's counters; nil fields are not counted.
type rotatorMetrics struct {
	renewErrors interface{ Inc() }
	rotations   interface{ Inc() }
	// replacedAge observes the age of a replaced certificate, in seconds.
	replacedAge interface{ Observe(float64) }
}

// rotator keeps one kind of certificate current: it renews it at its deadline, at once
// when it is missing (serving) or no longer fits the request, or when forced.
type rotator struct {
	kind  Kind
	store pki.Store
	// marker is the file that asks for a forced rotation; it outlives a restart.
	marker string
	// request is what to ask for.
	request pki.Request
	// client makes the CSRs, with the node's current credentials.
	client kubeapi.Interface
	// disabled, when set, says why this certificate is never rotated.
	disabled string
	// missingOK means a missing certificate is not requested but waited for (the client
	// certificate, which unitlet-config bootstraps).
	missingOK bool
	// checkRequest renews a certificate that lacks what request asks for (the serving
	// certificate's names and addresses).
	checkRequest bool

	clock   clock.Clock
	random  func() float64
	log     *slog.Logger
	metrics rotatorMetrics
	// published is called after every visible change.
	published func()

	wake chan struct{}

	mu         sync.Mutex
	cert       Certificate
	deadline   time.Time
	deadlineOf string // the serial deadline was computed for
	retryAt    time.Time
	beat       time.Time
	forced     uint64        // Rotate calls so far
	satisfied  uint64        // forced calls a completed rotation covered
	changed    chan struct{} // closed and replaced on every change
}

func (r *rotator) init() {
	r.wake = make(chan struct{}, 1)
	r.changed = make(chan struct{})
	r.cert = Certificate{Kind: r.kind, Path: r.store.CurrentPath(), State: "starting"}
	if r.disabled != "" {
		r.cert.State = r.disabled
	}
	r.beat = r.clock.Now()
	r.load()
}

// snapshot is the rotator's certificate and state.
func (r *rotator) snapshot() Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert
}

// update changes the visible state with fn and publishes it when it changed.
func (r *rotator) update(fn func(c *Certificate)) {
	r.mu.Lock()
	before := r.cert
	fn(&r.cert)
	after := r.cert
	changed := before.State != after.State || before.Failures != after.Failures ||
		!before.NextRotation.Equal(after.NextRotation) || !before.LastRotation.Equal(after.LastRotation) ||
		(before.Leaf == nil) != (after.Leaf == nil) || (before.Leaf != nil && !bytes.Equal(before.Leaf.Raw, after.Leaf.Raw))
	if changed {
		close(r.changed)
		r.changed = make(chan struct{})
	}
	r.mu.Unlock()
	if changed && r.published != nil {
		r.published()
	}
}

func (r *rotator) setState(s string) { r.update(func(c *Certificate) { c.State = s }) }

// load reads the store's current certificate into the visible state and returns it (nil
// with the reason when there is none).
func (r *rotator) load() (*currentCert, error) {
	cur, err := r.store.Current()
	if err != nil {
		r.update(func(c *Certificate) { c.Leaf, c.LastRotation = nil, time.Time{} })
		return nil, err
	}
	var installed time.Time
	if fi, err := os.Lstat(r.store.CurrentPath()); err == nil {
		installed = fi.ModTime() // the link is made anew by every update
	}
	r.update(func(c *Certificate) { c.Leaf, c.LastRotation = cur.Leaf, installed })
	key, _ := cur.PrivateKey.(crypto.Signer)
	return &currentCert{leaf: cur.Leaf, key: key}, nil
}

type currentCert struct {
	leaf *x509.Certificate
	key  crypto.Signer
}

// due says whether to rotate now, and why; otherwise when to look again.
func (r *rotator) due(cur *currentCert, loadErr error, now time.Time) (why string, next time.Time, state string) {
	if cur == nil {
		if r.missingOK {
			if errors.Is(loadErr, pki.ErrNoCertificate) {
				return "", time.Time{}, fmt.Sprintf("not bootstrapped yet: no %s (unitlet-config's TLS bootstrap writes it)", r.store.CurrentPath())
			}
			return "", time.Time{}, fmt.Sprintf("cannot read the certificate in use: %v", loadErr)
		}
		if errors.Is(loadErr, pki.ErrNoCertificate) {
			return "no certificate yet", time.Time{}, ""
		}
		return fmt.Sprintf("the certificate in use cannot be read (%v)", loadErr), time.Time{}, ""
	}
	if _, err := os.Stat(r.marker); err == nil {
		return "forced", time.Time{}, ""
	}
	if r.checkRequest && cur.key != nil {
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cur.leaf.Raw})
		if _, err := pki.Verify(certPEM, cur.key, r.request, now); err != nil {
			return fmt.Sprintf("the certificate in use no longer fits (%v)", err), time.Time{}, ""
		}
	}
	deadline := r.deadlineFor(cur.leaf)
	if !now.Before(deadline) {
		return fmt.Sprintf("past its rotation deadline %s", deadline.UTC().Format(time.RFC3339)), time.Time{}, ""
	}
	return "", deadline, "valid"
}

// deadlineFor is leaf's rotation deadline, jittered once per certificate.
func (r *rotator) deadlineFor(leaf *x509.Certificate) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id := leaf.SerialNumber.String() + "/" + leaf.NotBefore.String(); r.deadlineOf != id {
		r.deadline, r.deadlineOf = rotationDeadline(leaf, r.random()), id
	}
	return r.deadline
}

// run rotates until ctx ends.
func (r *rotator) run(ctx context.Context) error {
	if r.disabled != "" {
		r.setState(r.disabled)
		for {
			r.heartbeat()
			if !r.sleep(ctx, r.clock.Now().Add(recheckEvery)) {
				return nil
			}
		}
	}
	for {
		r.heartbeat()
		now := r.clock.Now()
		cur, loadErr := r.load()
		why, next, state := r.due(cur, loadErr, now)
		if why == "" {
			r.update(func(c *Certificate) { c.State, c.NextRotation = state, next })
			if !r.sleep(ctx, next) {
				return nil
			}
			continue
		}
		r.mu.Lock()
		retryAt := r.retryAt
		r.mu.Unlock()
		if now.Before(retryAt) {
			if !r.sleep(ctx, retryAt) {
				return nil
			}
			continue
		}
		err := r.rotate(ctx, cur, why)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			r.failed(err)
		}
	}
}

// rotate makes one attempt: a new key and CSR, the issued certificate installed.
func (r *rotator) rotate(ctx context.Context, cur *currentCert, why string) error {
	r.mu.Lock()
	forced := r.forced
	_, err := os.Stat(r.marker)
	r.mu.Unlock()
	markerSet := err == nil
	r.log.Info("rotating", "kind", r.kind.String(), "reason", why)
	r.setState("rotating: creating a CSR (" + why + ")")
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	certPEM, keyPEM, leaf, err := pki.Issue(actx, r.client, r.request, func(s string) { r.setState("rotating: " + s) })
	if err != nil {
		return err
	}
	now := r.clock.Now()
	path, err := r.store.Update(certPEM, keyPEM, now)
	if err != nil {
		return fmt.Errorf("install the new certificate: %w", err)
	}
	if markerSet {
		if err := os.Remove(r.marker); err != nil && !errors.Is(err, fs.ErrNotExist) {
			r.log.Warn("cannot remove the forced-rotation marker; the next start rotates again", "path", r.marker, "err", err)
		}
	}
	if err := r.store.Prune(keepFiles); err != nil {
		r.log.Warn("cannot remove old certificate files", "kind", r.kind.String(), "err", err)
	}
	if r.metrics.rotations != nil {
		r.metrics.rotations.Inc()
	}
	if r.metrics.replacedAge != nil && cur != nil {
		r.metrics.replacedAge.Observe(now.Sub(cur.leaf.NotBefore).Seconds())
	}
	r.log.Info("rotated", "kind", r.kind.String(), "path", path, "serial", leaf.SerialNumber.String(),
		"notAfter", leaf.NotAfter.UTC().Format(time.RFC3339))
	r.mu.Lock()
	r.retryAt = time.Time{}
	r.satisfied = max(r.satisfied, forced)
	r.mu.Unlock()
	r.load()
	next := r.deadlineFor(leaf)
	r.update(func(c *Certificate) { c.Failures, c.State, c.NextRotation = 0, "valid", next })
	return nil
}

// failed records a failed attempt and plans the next.
func (r *rotator) failed(err error) {
	if r.metrics.renewErrors != nil {
		r.metrics.renewErrors.Inc()
	}
	r.mu.Lock()
	attempt := r.cert.Failures + 1
	retryAt := r.clock.Now().Add(retryAfter(attempt, r.random()))
	r.retryAt = retryAt
	r.mu.Unlock()
	r.log.Warn("rotation failed", "kind", r.kind.String(), "attempt", attempt, "retryAt", retryAt, "err", err)
	r.update(func(c *Certificate) {
		c.Failures = attempt
		c.NextRotation = retryAt
		c.State = fmt.Sprintf("rotation failed (attempt %d, retry at %s): %v", attempt, retryAt.UTC().Format(time.RFC3339), err)
	})
}

// sleep waits until at most recheckEvery has passed, until is reached, Rotate is
// called or ctx ends (false).
func (r *rotator) sleep(ctx context.Context, until time.Time) bool {
	d := recheckEvery
	if !until.IsZero() {
		d = min(until.Sub(r.clock.Now()), recheckEvery)
	}
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := r.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
	case <-r.wake:
		// A forced rotation skips the backoff.
		r.mu.Lock()
		r.retryAt = time.Time{}
		r.mu.Unlock()
	}
	return true
}

func (r *rotator) heartbeat() {
	now := r.clock.Now()
	r.mu.Lock()
	r.beat = now
	r.mu.Unlock()
}

// stuck reports a loop that has not come round for longer than an attempt may take.
func (r *rotator) stuck(now time.Time) error {
	r.mu.Lock()
	beat := r.beat
	r.mu.Unlock()
	if limit := attemptTimeout + 2*recheckEvery; now.Sub(beat) > limit {
		return fmt.Errorf("the %s certificate's loop has not come round for %s", r.kind, now.Sub(beat).Round(time.Second))
	}
	return nil
}

// Rotate asks for a rotation now and waits until a certificate requested after the call
// is installed or ctx ends. The request is written to the marker file first, so a
// restart of the service in between still rotates.
func (r *rotator) Rotate(ctx context.Context) (Certificate, error) {
	if r.disabled != "" {
		return Certificate{}, fmt.Errorf("%w: %s", ErrNotRotating, r.disabled)
	}
	if r.missingOK {
		if _, err := r.store.Current(); err != nil {
			return Certificate{}, fmt.Errorf("%w: no %s certificate in use to rotate (%v)", ErrNotRotating, r.kind, err)
		}
	}
	// The marker and the count change together, under the lock an attempt reads both with.
	r.mu.Lock()
	err := os.MkdirAll(filepath.Dir(r.marker), 0o700)
	if err == nil {
		err = checkpoint.WriteFileAtomic(r.marker, []byte("rotation requested at "+r.clock.Now().UTC().Format(time.RFC3339)+"\n"), 0o600)
	}
	if err != nil {
		r.mu.Unlock()
		return Certificate{}, fmt.Errorf("ask for a rotation: %w", err)
	}
	r.forced++
	want := r.forced
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	for {
		r.mu.Lock()
		done, changed, cert := r.satisfied >= want, r.changed, r.cert
		r.mu.Unlock()
		if done {
			return cert, nil
		}
		select {
		case <-ctx.Done():
			return Certificate{}, ctx.Err()
		case <-changed:
		}
	}
}
