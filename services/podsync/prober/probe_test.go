package prober

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/unitlet/unitlet/services/podsync/lifecycle"
)

func hostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return h, n
}

// closedPort returns a local port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, p := hostPort(t, l.Addr().String())
	_ = l.Close()
	return p
}

// probeCase is one probe run against a real endpoint.
type probeCase struct {
	name    string
	probe   corev1.ProbeHandler
	timeout int32
	want    outcome
	wantMsg string // substring of the message
	wantErr bool
}

func runProbeCases(t *testing.T, r *probeRunner, c *corev1.Container, podIP string, cases []probeCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Probe{ProbeHandler: tc.probe, TimeoutSeconds: tc.timeout}
			got, msg, err := r.run(context.Background(), p, target{pod: testPod("u1", *c), podIP: podIP, container: c, containerID: "cid"})
			if (err != nil) != tc.wantErr {
				t.Fatalf("run error %v, want error: %t", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("outcome %s, want %s (message %q)", got.metricLabel(), tc.want.metricLabel(), msg)
			}
			if !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("message %q does not contain %q", msg, tc.wantMsg)
			}
		})
	}
}

func TestHTTPProbe(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer other.Close()
	_, otherPort := hostPort(t, other.Listener.Addr().String())

	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		if r.UserAgent() != "kube-probe/"+lifecycle.KubeVersion || r.Header.Get("X-Probe") != "yes" {
			http.Error(w, "bad headers "+r.UserAgent(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte("fine"))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(strings.Repeat("b", 100<<10))) })
	mux.HandleFunc("/bad", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusInternalServerError) })
	mux.HandleFunc("/same", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/bad", http.StatusFound) })
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://localhost:"+strconv.Itoa(otherPort)+"/", http.StatusFound)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	host, port := hostPort(t, srv.Listener.Addr().String())
	c := &corev1.Container{Name: "web", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}
	get := func(path string, port intstr.IntOrString) corev1.ProbeHandler {
		return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: port, HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "yes"}}}}
	}
	byNum := intstr.FromInt32(int32(port))
	r := &probeRunner{http: lifecycle.NewHTTPClient(0)}
	runProbeCases(t, r, c, host, []probeCase{
		{name: "200 by port name", probe: get("/ok", intstr.FromString("http")), timeout: 1, want: success, wantMsg: "fine"},
		{name: "body cut at 10 KiB", probe: get("/big", byNum), timeout: 1, want: success, wantMsg: strings.Repeat("b", 100)},
		{name: "500", probe: get("/bad", byNum), timeout: 1, want: failure, wantMsg: "statuscode: 500"},
		{name: "same-host redirect followed", probe: get("/same", byNum), timeout: 1, want: failure, wantMsg: "statuscode: 500"},
		{name: "redirect to another host is a success with a warning", probe: get("/away", byNum), timeout: 1, want: warning, wantMsg: "Probe terminated redirects, Response body: "},
		{name: "timeout", probe: get("/slow", byNum), timeout: 1, want: failure, wantMsg: "Timeout"},
		{name: "connection refused", probe: get("/ok", intstr.FromInt32(int32(closedPort(t)))), timeout: 1, want: failure, wantMsg: "refused"},
		{name: "unknown port name", probe: get("/ok", intstr.FromString("metrics")), timeout: 1, want: unknown, wantErr: true},
	})

	// The body kept is at most 10 KiB.
	_, msg, _ := r.run(context.Background(), &corev1.Probe{ProbeHandler: get("/big", byNum), TimeoutSeconds: 1}, target{pod: testPod("u1", *c), podIP: host, container: c})
	if len(msg) != lifecycle.MaxBodyBytes {
		t.Errorf("kept %d bytes of the body, want %d", len(msg), lifecycle.MaxBodyBytes)
	}
}

func TestTCPProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	host, port := hostPort(t, l.Addr().String())
	c := &corev1.Container{Name: "db", Ports: []corev1.ContainerPort{{Name: "sql", ContainerPort: int32(port)}}}
	tcp := func(host string, port intstr.IntOrString) corev1.ProbeHandler {
		return corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: host, Port: port}}
	}
	runProbeCases(t, &probeRunner{}, c, host, []probeCase{
		{name: "open", probe: tcp("", intstr.FromInt32(int32(port))), timeout: 1, want: success},
		{name: "open by name, explicit host", probe: tcp("127.0.0.1", intstr.FromString("sql")), timeout: 1, want: success},
		{name: "closed", probe: tcp("", intstr.FromInt32(int32(closedPort(t)))), timeout: 1, want: failure, wantMsg: "refused"},
		{name: "bad port", probe: tcp("", intstr.FromInt32(0)), timeout: 1, want: unknown, wantErr: true},
	})
}

func TestGRPCProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("cache", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()

	// A gRPC server without the health service.
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bare := grpc.NewServer()
	go func() { _ = bare.Serve(l2) }()
	defer bare.Stop()

	host, port := hostPort(t, l.Addr().String())
	_, barePort := hostPort(t, l2.Addr().String())
	rpc := func(port int, service string) corev1.ProbeHandler {
		a := &corev1.GRPCAction{Port: int32(port)}
		if service != "" {
			a.Service = &service
		}
		return corev1.ProbeHandler{GRPC: a}
	}
	c := &corev1.Container{Name: "svc"}
	runProbeCases(t, &probeRunner{}, c, host, []probeCase{
		{name: "server serving", probe: rpc(port, ""), timeout: 1, want: success, wantMsg: "service healthy"},
		{name: "service serving", probe: rpc(port, "db"), timeout: 1, want: success},
		{name: "service not serving", probe: rpc(port, "cache"), timeout: 1, want: failure, wantMsg: "NOT_SERVING"},
		{name: "unknown service", probe: rpc(port, "nope"), timeout: 1, want: failure, wantMsg: "NotFound"},
		{name: "no health service", probe: rpc(barePort, ""), timeout: 1, want: failure, wantMsg: "does not implement the grpc health protocol"},
		{name: "nothing listening", probe: rpc(closedPort(t), ""), timeout: 1, want: failure, wantMsg: "health rpc"},
		{name: "bad port", probe: rpc(0, ""), timeout: 1, want: unknown, wantErr: true},
	})
}

// execResult is a fixed answer of ExecSync.
type execResult struct {
	code int32
	err  error
	cmds [][]string
	tmo  []time.Duration
}

func (e *execResult) ExecSync(_ context.Context, _ string, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	e.cmds = append(e.cmds, cmd)
	e.tmo = append(e.tmo, timeout)
	return []byte("out:"), []byte("err"), e.code, e.err
}

func TestExecProbe(t *testing.T) {
	cases := []struct {
		name     string
		ex       *execResult
		timeout  int32
		want     outcome
		wantMsg  string
		wantErr  bool
		wantRuns int
	}{
		{name: "exit 0", ex: &execResult{}, timeout: 2, want: success, wantMsg: "out:err", wantRuns: 1},
		{name: "exit 1", ex: &execResult{code: 1}, timeout: 2, want: failure, wantMsg: "out:err", wantRuns: 1},
		{name: "timed out", ex: &execResult{err: status.Error(codes.DeadlineExceeded, "too slow")}, timeout: 2, want: failure, wantMsg: "timed out", wantRuns: 1},
		{name: "timeout defaults to 1s", ex: &execResult{}, timeout: 0, want: success, wantRuns: 1},
		{name: "runtime error retried", ex: &execResult{err: errors.New("no such container")}, timeout: 2, want: unknown, wantErr: true, wantRuns: maxProbeAttempts},
	}
	c := &corev1.Container{Name: "app", Env: []corev1.EnvVar{{Name: "FILE", Value: "/tmp/ok"}}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "$(FILE)"}}}, TimeoutSeconds: tc.timeout}
			got, msg, err := (&probeRunner{ex: tc.ex}).run(context.Background(), p, target{pod: testPod("u1", *c), container: c, containerID: "cid"})
			if (err != nil) != tc.wantErr || got != tc.want || !strings.Contains(msg, tc.wantMsg) {
				t.Fatalf("run = %s, %q, %v; want %s, %q, error %t", got.metricLabel(), msg, err, tc.want.metricLabel(), tc.wantMsg, tc.wantErr)
			}
			if len(tc.ex.cmds) != tc.wantRuns {
				t.Fatalf("%d exec calls, want %d", len(tc.ex.cmds), tc.wantRuns)
			}
			if !slices.Equal(tc.ex.cmds[0], []string{"cat", "/tmp/ok"}) {
				t.Errorf("command %q, want the env expanded", tc.ex.cmds[0])
			}
			wantTimeout := time.Duration(max(tc.timeout, 1)) * time.Second
			if tc.ex.tmo[0] != wantTimeout {
				t.Errorf("exec timeout %s, want %s", tc.ex.tmo[0], wantTimeout)
			}
		})
	}
}

func TestExpandStatic(t *testing.T) {
	env := []corev1.EnvVar{
		{Name: "A", Value: "alpha"},
		{Name: "EMPTY"},
		{Name: "FROM", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	}
	cases := map[string]string{
		"plain":          "plain",
		"$(A)":           "alpha",
		"x$(A)y$(A)":     "xalphayalpha",
		"$$(A)":          "$(A)",
		"$(MISSING)":     "$(MISSING)",
		"$(EMPTY)-":      "-",
		"$(FROM)":        "",
		"$(A":            "$(A",
		"cost $5 $":      "cost $5 $",
		"$()":            "$()",
		"a$$b":           "a$b",
		"$(A)$(MISSING)": "alpha$(MISSING)",
	}
	for in, want := range cases {
		if got := expandStatic([]string{in}, env)[0]; got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}
