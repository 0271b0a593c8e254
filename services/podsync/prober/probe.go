package prober

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/lifecycle"
)

// maxProbeAttempts is how often a probe that errored (could not be run at all) is tried
// in a row before the run is given up, as the kubelet does.
const maxProbeAttempts = 3

// outcome is what one probe run found.
type outcome int8

const (
	unknown outcome = iota // the probe could not be run, or no result yet
	success
	failure
	// warning is a success the user should hear about (an HTTP probe's redirect to
	// another host, which is not followed): a ProbeWarning event, then a success.
	warning
)

func (o outcome) metricLabel() string {
	switch o {
	case success, warning:
		return "successful"
	case failure:
		return "failed"
	default:
		return "unknown"
	}
}

// target is what a probe runs against: a snapshot taken under the manager's lock.
type target struct {
	pod         *corev1.Pod
	podIP       string
	container   *corev1.Container
	containerID string
}

// probeRunner runs probes of the four kinds.
type probeRunner struct {
	ex   lifecycle.Execer
	http *http.Client
}

// run runs probe p once (retrying a run that errored) and returns the outcome and the
// probe's output or failure message. An error means the probe could not be run.
func (r *probeRunner) run(ctx context.Context, p *corev1.Probe, t target) (outcome, string, error) {
	var (
		o   outcome
		msg string
		err error
	)
	for range maxProbeAttempts {
		o, msg, err = r.runOnce(ctx, p, t)
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	return o, msg, err
}

func (r *probeRunner) runOnce(ctx context.Context, p *corev1.Probe, t target) (outcome, string, error) {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Duration(defaultTimeoutSeconds) * time.Second
	}
	switch {
	case p.Exec != nil:
		return r.exec(ctx, p.Exec, t, timeout)
	case p.HTTPGet != nil:
		return r.httpGet(ctx, p.HTTPGet, t, timeout)
	case p.TCPSocket != nil:
		return tcpSocket(ctx, p.TCPSocket, t, timeout)
	case p.GRPC != nil:
		return grpcHealth(ctx, p.GRPC, t, timeout)
	default:
		return unknown, "", fmt.Errorf("probe of container %s: no exec, httpGet, tcpSocket or grpc action", t.container.Name)
	}
}

func (r *probeRunner) exec(ctx context.Context, a *corev1.ExecAction, t target, timeout time.Duration) (outcome, string, error) {
	cmd := expandStatic(a.Command, t.container.Env)
	out, err := lifecycle.ExecOutput(ctx, r.ex, t.containerID, cmd, timeout)
	var exitErr *lifecycle.ExitError
	switch {
	case err == nil:
		return success, string(out), nil
	case errors.As(err, &exitErr):
		return failure, string(out), nil
	case errors.Is(err, lifecycle.ErrTimedOut):
		return failure, err.Error(), nil
	default:
		return unknown, "", fmt.Errorf("exec probe of container %s: %w", t.container.Name, err)
	}
}

func (r *probeRunner) httpGet(ctx context.Context, a *corev1.HTTPGetAction, t target, timeout time.Duration) (outcome, string, error) {
	req, err := lifecycle.NewHTTPGetRequest(ctx, a, t.container, t.podIP, lifecycle.UserAgent("probe"))
	if err != nil {
		return unknown, "", fmt.Errorf("http probe: %w", err)
	}
	client := *r.http
	client.Timeout = timeout
	resp, err := client.Do(req)
	if err != nil {
		return failure, err.Error(), nil
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := lifecycle.ReadBody(resp.Body)
	if err != nil {
		return failure, fmt.Sprintf("http probe %s: %v", req.URL, err), nil
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return success, string(body), nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		// A redirect the client did not follow (to another host): a success with a warning.
		return warning, "Probe terminated redirects, Response body: " + string(body), nil
	default:
		return failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode), nil
	}
}

func tcpSocket(ctx context.Context, a *corev1.TCPSocketAction, t target, timeout time.Duration) (outcome, string, error) {
	port, err := lifecycle.ResolvePort(a.Port, t.container)
	if err != nil {
		return unknown, "", fmt.Errorf("tcp probe: %w", err)
	}
	host := a.Host
	if host == "" {
		host = t.podIP
	}
	d := lifecycle.Dialer()
	d.Timeout = timeout
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return failure, err.Error(), nil
	}
	_ = conn.Close()
	return success, "", nil
}

func grpcHealth(ctx context.Context, a *corev1.GRPCAction, t target, timeout time.Duration) (outcome, string, error) {
	if a.Port <= 0 || a.Port > 65535 {
		return unknown, "", fmt.Errorf("grpc probe of container %s: port %d is not a valid port number", t.container.Name, a.Port)
	}
	if t.podIP == "" {
		return unknown, "", fmt.Errorf("grpc probe of container %s: the pod has no IP", t.container.Name)
	}
	service := ""
	if a.Service != nil {
		service = *a.Service
	}
	addr := net.JoinHostPort(t.podIP, strconv.Itoa(int(a.Port)))
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent(lifecycle.UserAgent("probe")),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return lifecycle.Dialer().DialContext(ctx, "tcp", addr)
		}),
	)
	if err != nil {
		return unknown, "", fmt.Errorf("grpc probe of container %s: %s: %w", t.container.Name, addr, err)
	}
	defer func() { _ = conn.Close() }()

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		switch status.Code(err) {
		case codes.Unimplemented:
			return failure, fmt.Sprintf("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): %s", status.Convert(err).Message()), nil
		case codes.DeadlineExceeded:
			return failure, fmt.Sprintf("timeout: health rpc did not complete within %s", timeout), nil
		default:
			return failure, fmt.Sprintf("error: health rpc probe failed: %v", err), nil
		}
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return failure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String()), nil
	}
	return success, "service healthy", nil
}

// expandStatic expands $(NAME) in an exec probe's command with the container's env
// values as written in the spec (an env var set from a source expands to ""); $$ is a
// literal $, and a reference to an unknown name is left as written. Probes do not see
// values from fieldRef, configMaps or secrets, as with the kubelet.
func expandStatic(cmd []string, env []corev1.EnvVar) []string {
	if len(cmd) == 0 {
		return cmd
	}
	vars := make(map[string]string, len(env))
	for _, e := range env {
		vars[e.Name] = e.Value
	}
	out := make([]string, len(cmd))
	for i, s := range cmd {
		out[i] = criconfig.Expand(s, func(name string) (string, bool) {
			v, ok := vars[name]
			return v, ok
		})
	}
	return out
}
