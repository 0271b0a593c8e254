// Package nodeapi serves the node's HTTPS API on :10250 as the v1.36 kubelet serves it:
// /healthz, /pods, /stats/summary, /metrics, /metrics/resource, /metrics/cadvisor and
// /metrics/probes; with the debugging handlers, /containerLogs, /exec, /attach,
// /portForward, /run, /configz and /logs/ (the files under /var/log and the node log
// query); behind the kubelet's x509 / TokenReview authentication and SubjectAccessReview
// authorization on nodes/<subresource>.
package nodeapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	cliflag "k8s.io/component-base/cli/flag"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/pki"
)

// Pods lists the node's pods as podsync runs them and asks podsync for streaming sessions.
type Pods interface {
	// Pods is every pod on the node; /pods returns them as a v1 PodList.
	Pods(ctx context.Context) ([]*corev1.Pod, error)
	// StreamingURL asks the runtime (through podsync) for a one-time CRI streaming URL;
	// an apierrors NotFound for an unknown pod or container.
	StreamingURL(ctx context.Context, req *podsyncv1.GetStreamingURLRequest) (string, error)
	// PodUID resolves namespace/name to the pod's UID; an apierrors NotFound if unknown.
	PodUID(ctx context.Context, namespace, name string) (types.UID, error)
}

// Logs writes a container's log as the kubelet's /containerLogs does (errors: apierrors
// NotFound or BadRequest become 404 and 400).
type Logs interface {
	ContainerLogs(ctx context.Context, namespace, pod, container string, opts *corev1.PodLogOptions, stdout, stderr io.Writer) error
}

// Stats builds the /stats/summary.
type Stats interface {
	Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsv1alpha1.Summary, error)
}

// Options configure the server.
type Options struct {
	// Address to listen on, e.g. "0.0.0.0:10250" (config address:port).
	Address string
	// CertFile and KeyFile are the config's tlsCertFile and tlsPrivateKeyFile. When both are
	// empty (and GetCertificate is nil), a self-signed certificate for Hostname and IPs is
	// made and kept in CertDir as kubelet.crt and kubelet.key, and reused on restart.
	CertFile, KeyFile string
	CertDir           string
	Hostname          string
	IPs               []string
	// GetCertificate, when set, serves the certificate it returns for each handshake (the
	// serving certificate rotated without a restart); CertFile, KeyFile and CertDir are
	// then unused.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// TLSMinVersion, TLSCipherSuites and TLSCurvePreferences are the config's fields of
	// the same names (kubelet names: "VersionTLS13", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	// curve IDs); unset, TLS 1.2 and Go's defaults. unitlet-config refused versions below
	// 1.2 and insecure suites.
	TLSMinVersion       string
	TLSCipherSuites     []string
	TLSCurvePreferences []int32
	// MaxStreamingSessions bounds the exec, attach, portForward and run sessions open at
	// once (0: maxStreamingSessions).
	MaxStreamingSessions int
	// StreamingIdleTimeout is the config's streamingConnectionIdleTimeout: an exec, attach
	// or portForward session idle that long either way is closed; 0, never.
	StreamingIdleTimeout time.Duration
	// ServerTLSBootstrap (the config's serverTLSBootstrap): serve unitlet-certs's serving
	// certificate from CertDir (kubelet-server-current.pem), reloaded when it rotates; the
	// self-signed one until it is first issued. Unused with CertFile and KeyFile.
	ServerTLSBootstrap bool

	// Authentication and Authorization as in the KubeletConfiguration: x509.clientCAFile,
	// webhook.enabled/cacheTTL and anonymous.enabled (off unless set); mode AlwaysAllow or
	// Webhook (the default) with its cache TTLs.
	Authentication kubeletconfigv1beta1.KubeletAuthentication
	Authorization  kubeletconfigv1beta1.KubeletAuthorization
	// Client makes TokenReviews and SubjectAccessReviews. Nil means standalone: New then
	// refuses webhook authentication and authorization, as the kubelet (CheckStandalone);
	// with AlwaysAllow, anonymous callers (when enabled) may use every endpoint, x509
	// callers only as StandaloneUsers.
	Client kubernetes.Interface
	// StandaloneUsers are the x509 user names (certificate common names) allowed the
	// whole node API when standalone; no other caller with a certificate of the CA is.
	StandaloneUsers []string
	NodeName        string

	Pods  Pods
	Logs  Logs  // nil: /containerLogs answers 404
	Stats Stats // nil: /stats/summary answers 404
	// Metrics serves /metrics; nil: 404.
	Metrics http.Handler
	// ProbeMetrics serves /metrics/probes; nil: 404.
	ProbeMetrics http.Handler
	// Configz returns the /configz body ({"kubeletconfig": ...}); nil, or without the
	// debugging handlers: 404.
	Configz func() ([]byte, error)
	// ResourceMetrics serves /metrics/resource; nil: 404.
	ResourceMetrics http.Handler
	// CAdvisorMetrics serves /metrics/cadvisor; nil: 404.
	CAdvisorMetrics http.Handler
	// HealthChecks are /healthz's checks besides ping, on the node API and on ServeHealthz's
	// listener; a failing one is named in the answer.
	HealthChecks []healthz.HealthChecker
	// DisableDebuggingHandlers answers container logs, exec, attach, port forwarding, run,
	// /runningpods/, /debug/pprof/ and /logs/ with 405 and serves no /configz (kubelet
	// config enableDebuggingHandlers: false).
	DisableDebuggingHandlers bool
	// SystemLogHandler serves /logs/, the files under LogDir (config
	// enableSystemLogHandler); without it /logs/ answers 405. SystemLogQuery adds the node
	// log query, the journal of the node's services (enableSystemLogQuery). Both need the
	// debugging handlers, as on the kubelet.
	SystemLogHandler bool
	SystemLogQuery   bool
	// LogDir is the directory /logs/ serves ("": /var/log), and Journalctl the program
	// the node log query runs ("": journalctl in PATH).
	LogDir     string
	Journalctl string
	Log        *slog.Logger
}

// Server is the node's HTTPS API.
type Server struct {
	opts Options
	log  *slog.Logger
	auth *auth
	srv  *http.Server

	// sessions holds a token per open streaming session (maxStreamingSessions).
	sessions chan struct{}

	mu       sync.Mutex
	listener net.Listener
}

// Limits of the node API, so that a slow or greedy client cannot take unitlet-status down
// (and with it the node's lease).
const (
	// maxHeaderBytes bounds a request's header: a bearer token and a client certificate's
	// worth, not net/http's 1 MiB.
	maxHeaderBytes = 64 << 10
	// maxStreamingSessions is the default bound of the exec, attach, portForward and run
	// sessions open at once; one more is refused with 429.
	maxStreamingSessions = 128
	// runTimeout bounds a /run command; runOutputLimit its output.
	runTimeout     = 2 * time.Minute
	runOutputLimit = 1 << 20
)

// shutdownTimeout bounds the graceful shutdown; streaming sessions still open then are cut.
const shutdownTimeout = 5 * time.Second

// New checks the options, loads or makes the serving certificate and builds the
// authenticator and authorizer. It does not listen yet (see Listen and Run).
func New(o Options) (*Server, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Address == "" {
		return nil, errors.New("no address to listen on")
	}
	if o.NodeName == "" {
		return nil, errors.New("no node name")
	}
	if o.Pods == nil {
		return nil, errors.New("no pods source")
	}
	log := o.Log.With("component", "nodeapi")

	tlsConfig, err := serverTLS(o.TLSMinVersion, o.TLSCipherSuites, o.TLSCurvePreferences)
	if err != nil {
		return nil, err
	}
	if o.GetCertificate != nil {
		tlsConfig.GetCertificate = o.GetCertificate
	} else {
		cert, err := servingCertificate(log, o.CertFile, o.KeyFile, o.CertDir, o.Hostname, o.IPs, time.Now())
		if err != nil {
			return nil, err
		}
		if o.ServerTLSBootstrap && o.CertFile == "" {
			r := &rotatingCertificate{store: pki.Store{Dir: o.CertDir, Prefix: pki.ServerPrefix}, fallback: &cert, log: log}
			tlsConfig.GetCertificate = r.GetCertificate
		} else {
			tlsConfig.Certificates = []tls.Certificate{cert}
		}
	}

	a, err := newAuth(o.Client, o.NodeName, o.Authentication, o.Authorization, o.StandaloneUsers)
	if err != nil {
		return nil, err
	}
	if o.Client == nil {
		log.Info("standalone: no API client; authorization mode AlwaysAllow: anonymous callers are allowed only with authentication.anonymous.enabled, x509 callers only as the users UNITLET_NODE_API_USERS names",
			"anonymous", o.Authentication.Anonymous.Enabled != nil && *o.Authentication.Anonymous.Enabled, "clientCAFile", o.Authentication.X509.ClientCAFile, "users", o.StandaloneUsers)
	}
	if o.MaxStreamingSessions <= 0 {
		o.MaxStreamingSessions = maxStreamingSessions
	}
	s := &Server{opts: o, log: log, auth: a, sessions: make(chan struct{}, o.MaxStreamingSessions)}
	s.srv = &http.Server{
		Handler:   a.filter(log, s.routes()),
		TLSConfig: tlsConfig,
		// Also the TLS handshake's bound: a client that stalls is dropped after it.
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
		// No read or write timeout: logs follow and exec sessions stream for as long as
		// the client wants (streamingConnectionIdleTimeout ends idle sessions).
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// defaultCipherSuites are the TLS 1.2 suites served when tlsCipherSuites is not set: the
// ECDHE suites with AEAD ciphers, the strong ones of the CIS Kubernetes Benchmark's 4.2.12.
// Go's own defaults (the kubelet's) also accept CBC suites with SHA-1, which it does not.
var defaultCipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// serverTLS is the TLS configuration of the config's tlsMinVersion, tlsCipherSuites and
// tlsCurvePreferences, never below TLS 1.2; with no tlsCipherSuites, defaultCipherSuites.
func serverTLS(minVersion string, suites []string, curves []int32) (*tls.Config, error) {
	v, err := cliflag.TLSVersion(minVersion)
	if err != nil {
		return nil, fmt.Errorf("tlsMinVersion: %w", err)
	}
	if v < tls.VersionTLS12 {
		return nil, fmt.Errorf("tlsMinVersion: %s: unitlet serves TLS 1.2 or later", minVersion)
	}
	ids, err := cliflag.TLSCipherSuites(suites)
	if err != nil {
		return nil, fmt.Errorf("tlsCipherSuites: %w", err)
	}
	if len(ids) > 0 && !slices.Contains(ids, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) && !slices.Contains(ids, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256) {
		return nil, errors.New("tlsCipherSuites: HTTP/2 needs TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 or TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 in the list")
	}
	if len(ids) == 0 {
		ids = slices.Clone(defaultCipherSuites)
	}
	curveIDs, err := cliflag.TLSCurvePreferences(curves)
	if err != nil {
		return nil, fmt.Errorf("tlsCurvePreferences: %w", err)
	}
	return &tls.Config{
		MinVersion:       v,
		CipherSuites:     ids,
		CurvePreferences: curveIDs,
		// Ask for a client certificate without requiring or verifying it here: the x509
		// authenticator verifies it against the (reloadable) client CA bundle.
		ClientAuth: tls.RequestClientCert,
	}, nil
}

// Listen binds the address; Run calls it when it was not called before. Tests listen on
// port 0 and read the bound address from Address.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil {
		return nil
	}
	l, err := net.Listen("tcp", s.opts.Address)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.opts.Address, err)
	}
	s.listener = l
	return nil
}

// Address is the bound address, or "" before Listen.
func (s *Server) Address() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return ""
	}
	return s.listener.Addr().String()
}

// Run serves until ctx is done, then shuts down gracefully and returns nil.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	l := s.listener
	s.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.srv.BaseContext = func(net.Listener) context.Context { return ctx }
	var wg sync.WaitGroup
	wg.Go(func() { s.auth.run(ctx) })
	defer wg.Wait()

	served := make(chan error, 1)
	go func() { served <- s.srv.ServeTLS(l, "", "") }()
	s.log.Info("serving the node API", "address", l.Addr().String())

	select {
	case err := <-served:
		return fmt.Errorf("serve the node API: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer stop()
	if err := s.srv.Shutdown(shutdownCtx); err != nil {
		s.log.Warn("node API did not shut down in time; closing", "err", err)
		_ = s.srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve the node API: %w", err)
	}
	return nil
}
