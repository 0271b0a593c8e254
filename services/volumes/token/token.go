// Package token provides service-account tokens for projected volumes through the
// TokenRequest API, bound to the pod, cached and refreshed by the kubelet's rule: at 80%
// of a token's lifetime or once it is 24 hours old.
package token

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/shared/kubeapi"
)

const (
	// DefaultExpirationSeconds is the lifetime asked for when the projection names none,
	// that of the kubelet's default kube-api-access token (an hour and seven seconds,
	// which the API server recognizes and may extend).
	DefaultExpirationSeconds int64 = 3607

	// maxAge is the age at which a token is refreshed whatever its lifetime.
	maxAge = 24 * time.Hour
	// retryInterval is how long after a failed refresh the cached token is due again.
	retryInterval = 10 * time.Second
	// minRefreshDelay keeps a token from being due the moment it arrives when the API
	// server's clock is far ahead of ours.
	minRefreshDelay = 10 * time.Second
)

// Manager fetches and caches service-account tokens for pods. It is safe for concurrent
// use; requests for the same token are made one at a time.
type Manager struct {
	client kubeapi.Interface
	clock  clock.Clock
	log    *slog.Logger

	mu    sync.Mutex // guards cache and the fields of its entries but fetch
	cache map[key]*entry
}

// key is what makes two tokens the same token.
type key struct {
	namespace         string
	serviceAccount    string
	podUID            types.UID
	audience          string
	expirationSeconds int64
}

type entry struct {
	fetch sync.Mutex // held while the entry's token is requested

	token     []byte // nil until a token was received
	expires   time.Time
	refreshAt time.Time
	// reportedDue is set when NextRefresh reported the token due and cleared when Token
	// is asked for it; a token reported due twice without being asked for in between is
	// no longer used by the pod and is forgotten.
	reportedDue bool
}

// Option configures a Manager.
type Option func(*Manager)

// WithLogger sets the logger for refresh failures that a still valid cached token covers.
func WithLogger(log *slog.Logger) Option {
	return func(m *Manager) { m.log = log }
}

// NewManager returns a Manager requesting tokens through client and reading time from
// clock.
func NewManager(client kubeapi.Interface, clock clock.Clock, opts ...Option) *Manager {
	m := &Manager{
		client: client,
		clock:  clock,
		log:    slog.New(slog.DiscardHandler),
		cache:  make(map[key]*entry),
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Token returns a token of serviceAccount in the pod's namespace, bound to the pod, for
// audience (empty: the API server's own audiences) and lasting expirationSeconds (0: the
// default, 3607). A cached token is returned until it is due for refresh; when a refresh
// fails while the cached token is still valid, the cached token is returned and the
// refresh is retried on a later call.
func (m *Manager) Token(ctx context.Context, pod *corev1.Pod, serviceAccount, audience string, expirationSeconds int64) ([]byte, error) {
	token, _, err := m.TokenWithExpiry(ctx, pod, serviceAccount, audience, expirationSeconds)
	return token, err
}

// TokenWithExpiry is Token with the token's expiration time (what a CSI driver's
// tokenRequests hand it).
func (m *Manager) TokenWithExpiry(ctx context.Context, pod *corev1.Pod, serviceAccount, audience string, expirationSeconds int64) ([]byte, time.Time, error) {
	if pod == nil || pod.UID == "" || pod.Name == "" {
		return nil, time.Time{}, errors.New("request service account token: the pod's name and uid are required")
	}
	if serviceAccount == "" {
		return nil, time.Time{}, fmt.Errorf("request service account token for pod %s/%s: no service account name", pod.Namespace, pod.Name)
	}
	if expirationSeconds <= 0 {
		expirationSeconds = DefaultExpirationSeconds
	}
	k := key{
		namespace:         pod.Namespace,
		serviceAccount:    serviceAccount,
		podUID:            pod.UID,
		audience:          audience,
		expirationSeconds: expirationSeconds,
	}

	e := m.entry(k)
	e.fetch.Lock()
	defer e.fetch.Unlock()

	m.mu.Lock()
	e.reportedDue = false
	cached, expires, refreshAt := e.token, e.expires, e.refreshAt
	m.mu.Unlock()
	now := m.clock.Now()
	if cached != nil && now.Before(refreshAt) {
		return clone(cached), expires, nil
	}

	tr, err := m.request(ctx, pod, k)
	if err != nil {
		err = fmt.Errorf("request token of service account %s/%s for pod %s (audience %q): %w", k.namespace, k.serviceAccount, pod.Name, audience, err)
		if cached == nil {
			m.drop(k, e)
			return nil, time.Time{}, err
		}
		if !now.Before(expires) {
			return nil, time.Time{}, fmt.Errorf("cached token expired at %s and refresh failed: %w", expires.Format(time.RFC3339), err)
		}
		m.log.Warn("refreshing service account token failed, keeping the cached one",
			"pod", pod.Namespace+"/"+pod.Name, "serviceAccount", k.serviceAccount,
			"audience", audience, "expires", expires, "err", err)
		m.mu.Lock()
		e.refreshAt = earliest(now.Add(retryInterval), expires)
		m.mu.Unlock()
		return clone(cached), expires, nil
	}

	token := []byte(tr.Status.Token)
	expires = tr.Status.ExpirationTimestamp.Time
	m.mu.Lock()
	e.token = token
	e.expires = expires
	e.refreshAt = refreshTime(tr, now)
	m.mu.Unlock()
	return clone(token), expires, nil
}

// request asks the API server for a token bound to the pod.
func (m *Manager) request(ctx context.Context, pod *corev1.Pod, k key) (*authenticationv1.TokenRequest, error) {
	exp := k.expirationSeconds
	req := &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &exp,
			BoundObjectRef: &authenticationv1.BoundObjectReference{
				APIVersion: "v1",
				Kind:       "Pod",
				Name:       pod.Name,
				UID:        pod.UID,
			},
		},
	}
	if k.audience != "" {
		req.Spec.Audiences = []string{k.audience}
	}
	tr, err := m.client.CoreV1().ServiceAccounts(k.namespace).CreateToken(ctx, k.serviceAccount, req, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	if tr.Status.Token == "" {
		return nil, errors.New("the API server returned no token")
	}
	if tr.Status.ExpirationTimestamp.IsZero() {
		return nil, errors.New("the API server returned a token without expiration time")
	}
	return tr, nil
}

// refreshTime is when a token just received is due for refresh: 80% into its lifetime or
// at 24 hours of age, whichever comes first. The lifetime is what the API server granted
// (it may shorten or extend the one asked for): its answer's expirationSeconds, or the
// time left until its expirationTimestamp.
func refreshTime(tr *authenticationv1.TokenRequest, now time.Time) time.Time {
	expires := tr.Status.ExpirationTimestamp.Time
	lifetime := expires.Sub(now)
	if s := tr.Spec.ExpirationSeconds; s != nil && *s > 0 {
		lifetime = time.Duration(*s) * time.Second
	}
	issued := expires.Add(-lifetime)
	at := earliest(issued.Add(lifetime*8/10), issued.Add(maxAge))
	if floor := now.Add(minRefreshDelay); at.Before(floor) {
		at = earliest(floor, expires)
	}
	return at
}

// NextRefresh is the earliest time one of the pod's cached tokens is due for refresh, when
// its volume should be rewritten with a fresh token from Token; the zero time when the pod
// has no cached token. A time in the past means a token is due now. A token that
// NextRefresh reported due and that was not asked for by the time NextRefresh is called
// again is taken as no longer used and forgotten.
func (m *Manager) NextRefresh(podUID types.UID) time.Time {
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Time
	for k, e := range m.cache {
		if k.podUID != podUID || e.token == nil {
			continue
		}
		if !now.Before(e.refreshAt) {
			if e.reportedDue {
				delete(m.cache, k)
				continue
			}
			e.reportedDue = true
		}
		if next.IsZero() || e.refreshAt.Before(next) {
			next = e.refreshAt
		}
	}
	return next
}

// Forget drops the pod's cached tokens, for a pod whose volumes were released.
func (m *Manager) Forget(podUID types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.cache {
		if k.podUID == podUID {
			delete(m.cache, k)
		}
	}
}

// entry returns the cache entry of k, adding an empty one.
func (m *Manager) entry(k key) *entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.cache[k]
	if !ok {
		e = &entry{}
		m.cache[k] = e
	}
	return e
}

// drop removes e, which holds no token, unless another entry has taken its place.
func (m *Manager) drop(k key, e *entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cache[k] == e && e.token == nil {
		delete(m.cache, k)
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }
