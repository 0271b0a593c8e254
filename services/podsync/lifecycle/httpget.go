package lifecycle

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// KubeVersion is the Kubernetes major.minor unitlet behaves as; it goes into the
// User-Agent of probe and hook requests the way the kubelet puts its own version there.
const KubeVersion = "1.36"

// MaxBodyBytes is how much of a response body (or exec output) is read and kept.
const MaxBodyBytes = 10 << 10

// maxRedirects bounds how many same-host redirects a request follows.
const maxRedirects = 10

// UserAgent is the User-Agent the kubelet sends for purpose ("probe" or "lifecycle"):
// kube-probe/1.36, kube-lifecycle/1.36.
func UserAgent(purpose string) string {
	return "kube-" + purpose + "/" + KubeVersion
}

// ResolvePort returns the port number port names for container c: a number, or the name
// of one of c's ports (a string holding digits is taken as a number when no port has that name).
func ResolvePort(port intstr.IntOrString, c *corev1.Container) (int, error) {
	n := -1
	switch port.Type {
	case intstr.Int:
		n = port.IntValue()
	case intstr.String:
		found := false
		for _, p := range c.Ports {
			if p.Name == port.StrVal {
				n, found = int(p.ContainerPort), true
				break
			}
		}
		if !found {
			v, err := strconv.Atoi(port.StrVal)
			if err != nil {
				return -1, fmt.Errorf("container %s: port %q: no port of that name", c.Name, port.StrVal)
			}
			n = v
		}
	default:
		return -1, fmt.Errorf("container %s: port %v: neither a number nor a name", c.Name, port)
	}
	if n <= 0 || n > 65535 {
		return n, fmt.Errorf("container %s: port %s: %d is not a valid port number", c.Name, port.String(), n)
	}
	return n, nil
}

// NewHTTPGetRequest builds the GET request for an httpGet probe or hook of container c:
// host defaults to podIP, the port is resolved by number or name, scheme defaults to http,
// the action's headers are set (a Host header sets the request's host), and User-Agent
// and Accept get the kubelet's defaults unless the action sets them.
func NewHTTPGetRequest(ctx context.Context, h *corev1.HTTPGetAction, c *corev1.Container, podIP, userAgent string) (*http.Request, error) {
	scheme := strings.ToLower(string(h.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	host := h.Host
	if host == "" {
		host = podIP
	}
	if host == "" {
		return nil, fmt.Errorf("container %s: httpGet: no host and the pod has no IP", c.Name)
	}
	port, err := ResolvePort(h.Port, c)
	if err != nil {
		return nil, fmt.Errorf("httpGet: %w", err)
	}
	u, err := url.Parse(h.Path)
	if err != nil {
		u = &url.URL{Path: h.Path}
	}
	u.Scheme = scheme
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("container %s: httpGet %s: %w", c.Name, u, err)
	}
	hdr := make(http.Header, len(h.HTTPHeaders)+2)
	for _, kv := range h.HTTPHeaders {
		hdr.Add(kv.Name, kv.Value)
	}
	if _, ok := hdr["User-Agent"]; !ok {
		hdr.Set("User-Agent", userAgent)
	}
	if _, ok := hdr["Accept"]; !ok {
		hdr.Set("Accept", "*/*")
	} else if hdr.Get("Accept") == "" {
		// An explicitly empty Accept means "send none".
		hdr.Del("Accept")
	}
	req.Header = hdr
	req.Host = hdr.Get("Host")
	return req, nil
}

// NewHTTPClient returns the client probes and hooks use: no proxy, no keep-alives, no
// compression, certificates not verified (as the kubelet), redirects followed only to the
// same host. timeout 0 means none (the request's context bounds it).
func NewHTTPClient(timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         Dialer().DialContext,
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the kubelet: pods' certificates are not ours to check
		DisableKeepAlives:   true,
		DisableCompression:  true,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: timeout, CheckRedirect: sameHostRedirects}
}

// sameHostRedirects follows a redirect only to the host of the first request; a redirect
// elsewhere ends the chain and the redirect response itself is returned.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	return nil
}

// ReadBody reads at most MaxBodyBytes of r; a longer body is cut, not an error.
func ReadBody(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxBodyBytes))
	if err != nil {
		return b, fmt.Errorf("read response body: %w", err)
	}
	return b, nil
}

// isHTTPAnswerToHTTPS reports whether err says an https request was answered in plain http.
func isHTTPAnswerToHTTPS(err error) bool {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return false
	}
	return strings.Contains(ue.Err.Error(), "server gave HTTP response to HTTPS client")
}
