package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/healthz"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

type fakeStats struct{}

func (fakeStats) Summary(_ context.Context, onlyCPUAndMemory bool) (*statsv1alpha1.Summary, error) {
	name := "full"
	if onlyCPUAndMemory {
		name = "cpu-and-memory"
	}
	return &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: name}}, nil
}

// fakeLogs records the options of each call and writes "out" and "err" lines.
type fakeLogs struct {
	mu    sync.Mutex
	calls []logCall
}

type logCall struct {
	namespace, pod, container string
	opts                      corev1.PodLogOptions
}

func (f *fakeLogs) ContainerLogs(_ context.Context, namespace, pod, container string, opts *corev1.PodLogOptions, stdout, stderr io.Writer) error {
	f.mu.Lock()
	f.calls = append(f.calls, logCall{namespace, pod, container, *opts})
	f.mu.Unlock()
	switch pod {
	case "missing":
		return apierrors.NewNotFound(corev1.Resource("pods"), pod)
	case "broken":
		return errors.New("runtime exploded")
	}
	if _, err := io.WriteString(stdout, "out line\n"); err != nil {
		return err
	}
	_, err := io.WriteString(stderr, "err line\n")
	return err
}

func (f *fakeLogs) last() logCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[len(f.calls)-1]
}

func TestContainerLogsOptions(t *testing.T) {
	logs := &fakeLogs{}
	authn, authz := openAuth()
	s := startServer(t, Options{Client: (&reviews{}).clientset(t), Authentication: authn, Authorization: authz, Logs: logs})
	c, base := client(t), "https://"+s.Address()+"/containerLogs/ns1/web/app"
	since := metav1.NewTime(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))

	for _, tc := range []struct {
		query string
		want  corev1.PodLogOptions
	}{
		{"", corev1.PodLogOptions{}},
		{"?follow=true&timestamps=1&previous=false", corev1.PodLogOptions{Follow: true, Timestamps: true}},
		{"?previous=true&tailLines=10&limitBytes=500", corev1.PodLogOptions{Previous: true, TailLines: ptr.To[int64](10), LimitBytes: ptr.To[int64](500)}},
		{"?sinceSeconds=30", corev1.PodLogOptions{SinceSeconds: ptr.To[int64](30)}},
		{"?sinceTime=2026-03-04T05:06:07Z", corev1.PodLogOptions{SinceTime: &since}},
		{"?tail=5", corev1.PodLogOptions{TailLines: ptr.To[int64](5)}},
		{"?tail=all&tailLines=5", corev1.PodLogOptions{}},
	} {
		code, body := do(t, c, http.MethodGet, base+tc.query, "")
		if code != http.StatusOK || body != "out line\nerr line\n" {
			t.Errorf("GET %s: %d %q, want 200 with both lines", tc.query, code, body)
			continue
		}
		got := logs.last()
		tc.want.Container = "app"
		if got.namespace != "ns1" || got.pod != "web" || got.container != "app" {
			t.Errorf("GET %s: logs of %s/%s/%s, want ns1/web/app", tc.query, got.namespace, got.pod, got.container)
		}
		if got.opts.SinceTime != nil && tc.want.SinceTime != nil && got.opts.SinceTime.Equal(tc.want.SinceTime) {
			got.opts.SinceTime = tc.want.SinceTime
		}
		if !reflect.DeepEqual(got.opts, tc.want) {
			t.Errorf("GET %s: options %+v, want %+v", tc.query, got.opts, tc.want)
		}
	}

	for _, tc := range []struct {
		url  string
		want int
	}{
		{base + "?tailLines=x", http.StatusBadRequest},
		{base + "?sinceTime=yesterday", http.StatusBadRequest},
		{base + "?tailLines=-1", http.StatusUnprocessableEntity},
		{base + "?limitBytes=0", http.StatusUnprocessableEntity},
		{base + "?sinceSeconds=0", http.StatusUnprocessableEntity},
		{base + "?sinceSeconds=5&sinceTime=2026-03-04T05:06:07Z", http.StatusUnprocessableEntity},
		{base + "?stream=Stdout", http.StatusUnprocessableEntity},
		{"https://" + s.Address() + "/containerLogs/ns1/missing/app", http.StatusNotFound},
		{"https://" + s.Address() + "/containerLogs/ns1/broken/app", http.StatusInternalServerError},
		{"https://" + s.Address() + "/containerLogs/ns1/web", http.StatusNotFound},
	} {
		if code, body := do(t, c, http.MethodGet, tc.url, ""); code != tc.want {
			t.Errorf("GET %s: %d %q, want %d", tc.url, code, body, tc.want)
		}
	}
}

func TestEndpoints(t *testing.T) {
	authn, authz := openAuth()
	var unhealthy atomic.Bool
	pods := &fakePods{pods: []*corev1.Pod{testPod("ns1", "web", "uid-1"), testPod("ns2", "db", "uid-2")}}
	s := startServer(t, Options{
		Client: (&reviews{}).clientset(t), Authentication: authn, Authorization: authz,
		Pods:    pods,
		Stats:   fakeStats{},
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "kubelet_running_pods 2\n") }),
		ResourceMetrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "resource_scrape_error 0\n")
		}),
		ProbeMetrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "prober_probe_total 3\n")
		}),
		Configz: func() ([]byte, error) { return []byte(`{"kubeletconfig":{"maxPods":110}}`), nil },
		HealthChecks: []healthz.HealthChecker{healthz.NamedCheck("unitlet-podsync", func(*http.Request) error {
			if unhealthy.Load() {
				return errors.New("podsync unreachable")
			}
			return nil
		})},
	})
	c, base := client(t), "https://"+s.Address()

	code, body := do(t, c, http.MethodGet, base+"/pods", "")
	var list corev1.PodList
	if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil {
		t.Fatalf("GET /pods: %d %q (%v)", code, body, err)
	}
	if list.Kind != "PodList" || list.APIVersion != "v1" || len(list.Items) != 2 || list.Items[1].Name != "db" {
		t.Errorf("GET /pods: %+v, want a v1 PodList of web and db", list)
	}

	for _, tc := range []struct{ path, want string }{
		{"/stats/summary", `"nodeName":"full"`},
		{"/stats/summary?only_cpu_and_memory=true", `"nodeName":"cpu-and-memory"`},
		{"/metrics", "kubelet_running_pods 2\n"},
		{"/metrics/resource", "resource_scrape_error 0\n"},
		{"/metrics/probes", "prober_probe_total 3\n"},
		{"/configz", `{"kubeletconfig":{"maxPods":110}}`},
		{"/healthz", "ok"},
	} {
		code, body := do(t, c, http.MethodGet, base+tc.path, "")
		if code != http.StatusOK || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d %q, want 200 containing %q", tc.path, code, body, tc.want)
		}
	}
	// The v1.36 kubelet serves no /spec (nor /debug/flags/v with debugging handlers off).
	for _, path := range []string{"/nothing", "/pods/extra", "/stats/other", "/containerLogs/ns1/web/app", "/spec", "/spec/", "/runningpods/"} {
		if code, _ := do(t, c, http.MethodGet, base+path, ""); code != http.StatusNotFound {
			t.Errorf("GET %s: status %d, want 404", path, code)
		}
	}
	// With the debugging handlers, profiling and log verbosity answer as the kubelet's
	// with enableProfilingHandler and enableDebugFlagsHandler false: unitlet serves neither.
	for _, tc := range []struct{ method, path, want string }{
		{http.MethodGet, "/debug/pprof/", "profiling endpoint is disabled.\n"},
		{http.MethodGet, "/debug/pprof/heap", "profiling endpoint is disabled.\n"},
		{http.MethodPut, "/debug/flags/v", "flags endpoint is disabled.\n"},
	} {
		if code, body := do(t, c, tc.method, base+tc.path, ""); code != http.StatusMethodNotAllowed || body != tc.want {
			t.Errorf("%s %s: %d %q, want 405 %q", tc.method, tc.path, code, body, tc.want)
		}
	}
	unhealthy.Store(true)
	if code, _ := do(t, c, http.MethodGet, base+"/healthz", ""); code != http.StatusInternalServerError {
		t.Errorf("GET /healthz while unhealthy: status %d, want 500", code)
	}
}

// enableDebuggingHandlers: false answers as the v1.36 kubelet's NewServer without
// InstallAuthRequiredHandlers: the debugging endpoints, /runningpods/, /debug/pprof/ and
// /logs/ 405, /configz (installed only with the debugging handlers) and /spec 404; the
// rest is served.
func TestDebuggingHandlersCanBeDisabled(t *testing.T) {
	authn, authz := openAuth()
	pods := &fakePods{pods: []*corev1.Pod{testPod("ns1", "web", "uid-1")}}
	s := startServer(t, Options{
		Client: (&reviews{}).clientset(t), Authentication: authn, Authorization: authz,
		Pods: pods, Logs: &fakeLogs{}, Stats: fakeStats{}, DisableDebuggingHandlers: true,
		SystemLogHandler: true, SystemLogQuery: true, LogDir: t.TempDir(),
		Configz: func() ([]byte, error) { return []byte(`{"kubeletconfig":{"maxPods":110}}`), nil },
	})
	c, base := client(t), "https://"+s.Address()
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/containerLogs/ns1/web/app"},
		{http.MethodPost, "/exec/ns1/web/app?command=ls"},
		{http.MethodPost, "/attach/ns1/web/app"},
		{http.MethodPost, "/portForward/ns1/web"},
		{http.MethodPost, "/run/ns1/web/app?cmd=ls"},
		{http.MethodGet, "/runningpods/"},
		{http.MethodGet, "/debug/pprof/"},
		{http.MethodGet, "/debug/pprof/profile?seconds=1"},
		{http.MethodGet, "/logs/"},
		{http.MethodGet, "/logs/syslog"},
		{http.MethodGet, "/logs/?query=unitlet-status"},
	} {
		code, body := do(t, c, tc.method, base+tc.path, "")
		if code != http.StatusMethodNotAllowed || body != "Debug endpoints are disabled.\n" {
			t.Errorf("%s %s: %d %q, want 405 \"Debug endpoints are disabled.\"", tc.method, tc.path, code, body)
		}
	}
	for _, path := range []string{"/configz", "/spec", "/debug/flags/v"} {
		if code, body := do(t, c, http.MethodGet, base+path, ""); code != http.StatusNotFound {
			t.Errorf("GET %s: %d %q, want 404", path, code, body)
		}
	}
	for _, path := range []string{"/pods", "/healthz", "/stats/summary"} {
		if code, _ := do(t, c, http.MethodGet, base+path, ""); code != http.StatusOK {
			t.Errorf("GET %s: %d, want 200", path, code)
		}
	}
}

// /healthz over plain HTTP carries the node API's checks and nothing else.
func TestServeHealthz(t *testing.T) {
	authn, authz := openAuth()
	var unhealthy atomic.Bool
	s := startServer(t, Options{
		Client: (&reviews{}).clientset(t), Authentication: authn, Authorization: authz, Pods: &fakePods{},
		HealthChecks: []healthz.HealthChecker{healthz.NamedCheck("unitlet-podsync", func(*http.Request) error {
			if unhealthy.Load() {
				return errors.New("podsync unreachable")
			}
			return nil
		})},
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ServeHealthz(ctx, l) }()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + l.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("GET /healthz: %d %q, want 200 ok", code, body)
	}
	if code, _ := get("/pods"); code != http.StatusNotFound {
		t.Errorf("GET /pods on the healthz port: %d, want 404", code)
	}
	unhealthy.Store(true)
	if code, body := get("/healthz"); code != http.StatusInternalServerError || !strings.Contains(body, "[-]unitlet-podsync failed") {
		t.Errorf("GET /healthz while unhealthy: %d %q, want 500 naming unitlet-podsync", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ServeHealthz after its context ended: %v", err)
	}
}
