package lifecycle

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// fakeExecer answers ExecSync with fixed output and records the calls.
type fakeExecer struct {
	stdout, stderr string
	code           int32
	err            error

	mu    sync.Mutex
	calls [][]string
	ids   []string
	tmo   []time.Duration
}

func (f *fakeExecer) ExecSync(_ context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, cmd)
	f.ids = append(f.ids, id)
	f.tmo = append(f.tmo, timeout)
	return []byte(f.stdout), []byte(f.stderr), f.code, f.err
}

func testPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1"}}
}

// serverHostPort splits a test server's URL into host and port.
func serverHostPort(t *testing.T, raw string) (string, int) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return u.Hostname(), p
}

func TestRunHookExecAndSleep(t *testing.T) {
	c := &corev1.Container{Name: "app"}
	cmd := []string{"sh", "-c", "echo hi"}
	cases := []struct {
		name    string
		ex      *fakeExecer
		h       *corev1.LifecycleHandler
		ctx     func() (context.Context, context.CancelFunc)
		wantErr []string // substrings of the error; nil means success
		isErr   error
	}{
		{name: "exec success", ex: &fakeExecer{stdout: "ok"}, h: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}},
		{
			name:    "exec non-zero exit carries output",
			ex:      &fakeExecer{stdout: "partial\n", stderr: "boom", code: 3},
			h:       &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}},
			wantErr: []string{`exec lifecycle hook ([sh -c echo hi]) for container "app" in pod ns/web failed`, "exited with 3: boom", `message: "partial\nboom"`},
		},
		{
			name:    "exec runtime error",
			ex:      &fakeExecer{err: errors.New("container not running")},
			h:       &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}},
			wantErr: []string{"container not running", "cid"},
		},
		{
			name:    "exec timeout",
			ex:      &fakeExecer{err: status.Error(codes.DeadlineExceeded, "deadline")},
			h:       &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}},
			wantErr: []string{"timed out"},
			isErr:   ErrTimedOut,
		},
		{name: "sleep zero", ex: &fakeExecer{}, h: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 0}}},
		{
			name: "sleep cut short",
			ex:   &fakeExecer{},
			h:    &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 30}},
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 20*time.Millisecond)
			},
			wantErr: []string{"sleep lifecycle hook (30)", "terminated before sleep hook finished"},
			isErr:   context.DeadlineExceeded,
		},
		{name: "no action", ex: &fakeExecer{}, h: &corev1.LifecycleHandler{}, wantErr: []string{"no exec, httpGet or sleep"}},
		{name: "nil handler", ex: &fakeExecer{}, h: nil, wantErr: []string{"no handler"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.Background(), func() {}
			if tc.ctx != nil {
				ctx, cancel = tc.ctx()
			}
			defer cancel()
			err := RunHook(ctx, tc.ex, testPod(), c, "cid", "10.0.0.1", tc.h)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("RunHook: %v", err)
				}
			} else {
				if err == nil {
					t.Fatalf("RunHook: no error, want one containing %q", tc.wantErr)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				if tc.isErr != nil && !errors.Is(err, tc.isErr) {
					t.Errorf("error %q is not %v", err, tc.isErr)
				}
			}
			if tc.h != nil && tc.h.Exec != nil {
				if len(tc.ex.calls) != 1 || strings.Join(tc.ex.calls[0], " ") != "sh -c echo hi" || tc.ex.ids[0] != "cid" || tc.ex.tmo[0] != 0 {
					t.Errorf("exec calls %v ids %v timeouts %v, want one call of the command in cid without timeout", tc.ex.calls, tc.ex.ids, tc.ex.tmo)
				}
			}
		})
	}
}

// seen is what a test HTTP server saw of the last request.
type seen struct {
	mu     sync.Mutex
	n      int
	path   string
	ua     string
	header http.Header
	host   string
}

func (s *seen) handler(code int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.n++
		s.path = r.URL.RequestURI()
		s.ua = r.UserAgent()
		s.header = r.Header.Clone()
		s.host = r.Host
		s.mu.Unlock()
		w.WriteHeader(code)
		_, _ = w.Write([]byte(strings.Repeat("x", 20<<10)))
	}
}

func TestRunHookHTTPGet(t *testing.T) {
	cases := []struct {
		name     string
		code     int
		port     func(p int) intstr.IntOrString
		scheme   corev1.URIScheme
		host     func(h string) string
		podIP    func(h string) string
		headers  []corev1.HTTPHeader
		wantErr  string
		wantReqs int
		wantUA   string
	}{
		{name: "by port number, pod IP as host", code: 200, wantReqs: 1, wantUA: "kube-lifecycle/" + KubeVersion},
		{name: "by port name", code: 204, port: func(int) intstr.IntOrString { return intstr.FromString("web") }, wantReqs: 1, wantUA: "kube-lifecycle/" + KubeVersion},
		{name: "error status still delivered", code: 500, wantReqs: 1, wantUA: "kube-lifecycle/" + KubeVersion},
		{name: "explicit host, no pod IP", code: 200, host: func(h string) string { return h }, podIP: func(string) string { return "" }, wantReqs: 1, wantUA: "kube-lifecycle/" + KubeVersion},
		{name: "headers and own user agent", code: 200, headers: []corev1.HTTPHeader{{Name: "X-Hook", Value: "pre-stop"}, {Name: "user-agent", Value: "mine"}}, wantReqs: 1, wantUA: "mine"},
		{name: "https answered in http falls back", code: 200, scheme: corev1.URISchemeHTTPS, wantReqs: 1, wantUA: "kube-lifecycle/" + KubeVersion},
		{name: "unknown port name", code: 200, port: func(int) intstr.IntOrString { return intstr.FromString("nope") }, wantErr: `port "nope"`},
		{name: "no pod IP", code: 200, podIP: func(string) string { return "" }, wantErr: "no host and the pod has no IP"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s seen
			srv := httptest.NewServer(s.handler(tc.code))
			defer srv.Close()
			host, port := serverHostPort(t, srv.URL)
			c := &corev1.Container{Name: "app", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: int32(port)}}}
			h := &corev1.HTTPGetAction{Path: "/hook?x=1", Port: intstr.FromInt32(int32(port)), Scheme: tc.scheme, HTTPHeaders: tc.headers}
			if tc.port != nil {
				h.Port = tc.port(port)
			}
			if tc.host != nil {
				h.Host = tc.host(host)
			}
			podIP := host
			if tc.podIP != nil {
				podIP = tc.podIP(host)
			}
			err := RunHook(context.Background(), &fakeExecer{}, testPod(), c, "cid", podIP, &corev1.LifecycleHandler{HTTPGet: h})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("RunHook error %v, want one containing %q", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), `http lifecycle hook (/hook?x=1) for container "app" in pod ns/web`) {
					t.Errorf("error %q does not name the hook, container and pod", err)
				}
			} else if err != nil {
				t.Fatalf("RunHook: %v", err)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.n != tc.wantReqs {
				t.Fatalf("server saw %d requests, want %d", s.n, tc.wantReqs)
			}
			if s.n == 0 {
				return
			}
			if s.path != "/hook?x=1" {
				t.Errorf("path %q, want /hook?x=1", s.path)
			}
			if s.ua != tc.wantUA {
				t.Errorf("User-Agent %q, want %q", s.ua, tc.wantUA)
			}
			for _, kv := range tc.headers {
				if got := s.header.Get(kv.Name); got != kv.Value {
					t.Errorf("header %s = %q, want %q", kv.Name, got, kv.Value)
				}
			}
		})
	}
}

func TestRunHookHTTPGetConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	c := &corev1.Container{Name: "app"}
	h := &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(port))}
	err = RunHook(context.Background(), &fakeExecer{}, testPod(), c, "cid", "127.0.0.1", &corev1.LifecycleHandler{HTTPGet: h})
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("RunHook error %v, want connection refused", err)
	}
}

func TestResolvePort(t *testing.T) {
	c := &corev1.Container{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "81", ContainerPort: 9090}}}
	cases := []struct {
		port    intstr.IntOrString
		want    int
		wantErr bool
	}{
		{port: intstr.FromInt32(80), want: 80},
		{port: intstr.FromString("http"), want: 8080},
		{port: intstr.FromString("81"), want: 9090}, // a name wins over digits
		{port: intstr.FromString("8443"), want: 8443},
		{port: intstr.FromString("grpc"), wantErr: true},
		{port: intstr.FromInt32(0), wantErr: true},
		{port: intstr.FromInt32(70000), wantErr: true},
	}
	for _, tc := range cases {
		got, err := ResolvePort(tc.port, c)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("ResolvePort(%s) = %d, %v; want %d, error %v", tc.port.String(), got, err, tc.want, tc.wantErr)
		}
	}
}

func TestNewHTTPGetRequest(t *testing.T) {
	c := &corev1.Container{Name: "app"}
	cases := []struct {
		name       string
		h          corev1.HTTPGetAction
		wantURL    string
		wantHost   string
		wantAccept []string
	}{
		{name: "defaults", h: corev1.HTTPGetAction{Port: intstr.FromInt32(80)}, wantURL: "http://10.1.2.3:80", wantAccept: []string{"*/*"}},
		{name: "https path query", h: corev1.HTTPGetAction{Port: intstr.FromInt32(443), Scheme: "HTTPS", Path: "/healthz?full=1"}, wantURL: "https://10.1.2.3:443/healthz?full=1", wantAccept: []string{"*/*"}},
		{name: "host header", h: corev1.HTTPGetAction{Port: intstr.FromInt32(80), HTTPHeaders: []corev1.HTTPHeader{{Name: "host", Value: "example.com"}}}, wantURL: "http://10.1.2.3:80", wantHost: "example.com", wantAccept: []string{"*/*"}},
		{name: "empty accept dropped", h: corev1.HTTPGetAction{Port: intstr.FromInt32(80), HTTPHeaders: []corev1.HTTPHeader{{Name: "Accept", Value: ""}}}, wantURL: "http://10.1.2.3:80"},
		{name: "ipv6 host", h: corev1.HTTPGetAction{Port: intstr.FromInt32(80), Host: "fd00::1"}, wantURL: "http://[fd00::1]:80", wantAccept: []string{"*/*"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := NewHTTPGetRequest(context.Background(), &tc.h, c, "10.1.2.3", UserAgent("probe"))
			if err != nil {
				t.Fatal(err)
			}
			if req.URL.String() != tc.wantURL {
				t.Errorf("URL %s, want %s", req.URL, tc.wantURL)
			}
			if req.Host != tc.wantHost {
				t.Errorf("Host %q, want %q", req.Host, tc.wantHost)
			}
			if got := req.Header.Values("Accept"); strings.Join(got, ",") != strings.Join(tc.wantAccept, ",") {
				t.Errorf("Accept %q, want %q", got, tc.wantAccept)
			}
			if ua := req.Header.Get("User-Agent"); ua != "kube-probe/"+KubeVersion {
				t.Errorf("User-Agent %q", ua)
			}
		})
	}
}

func TestHTTPClientRedirects(t *testing.T) {
	var other seen
	otherSrv := httptest.NewServer(other.handler(200))
	defer otherSrv.Close()
	_, otherPort := serverHostPort(t, otherSrv.URL)

	var final seen
	mux := http.NewServeMux()
	mux.HandleFunc("/same", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/final", http.StatusFound) })
	mux.HandleFunc("/final", final.handler(200))
	// localhost is another host name than 127.0.0.1, so this redirect leaves the host.
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://localhost:"+strconv.Itoa(otherPort)+"/", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	cases := []struct {
		path     string
		wantCode int
		wantErr  bool
	}{
		{path: "/same", wantCode: 200},
		{path: "/away", wantCode: http.StatusFound},
		{path: "/loop", wantErr: true},
	}
	client := NewHTTPClient(5 * time.Second)
	for _, tc := range cases {
		resp, err := client.Get(srv.URL + tc.path)
		if tc.wantErr {
			if err == nil {
				t.Errorf("GET %s: no error, want the redirect limit", tc.path)
				_ = resp.Body.Close()
			}
			continue
		}
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.wantCode {
			t.Errorf("GET %s: status %d, want %d", tc.path, resp.StatusCode, tc.wantCode)
		}
	}
	if final.n != 1 {
		t.Errorf("same-host redirect target saw %d requests, want 1", final.n)
	}
	if other.n != 0 {
		t.Errorf("other-host redirect target saw %d requests, want 0", other.n)
	}
}

func TestReadBodyLimit(t *testing.T) {
	b, err := ReadBody(strings.NewReader(strings.Repeat("a", 3*MaxBodyBytes)))
	if err != nil || len(b) != MaxBodyBytes {
		t.Fatalf("ReadBody: %d bytes, %v; want %d", len(b), err, MaxBodyBytes)
	}
}
