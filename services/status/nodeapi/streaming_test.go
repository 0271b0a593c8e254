package nodeapi

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

// streamingBackend is a fake CRI streaming server: it answers an upgrade with 101 and then
// echoes what it reads, and remembers the request URIs it saw.
type streamingBackend struct {
	*httptest.Server
	mu   sync.Mutex
	uris []string
}

func newStreamingBackend(t *testing.T) *streamingBackend {
	b := &streamingBackend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.uris = append(b.uris, r.URL.RequestURI())
		b.mu.Unlock()
		if !strings.EqualFold(r.Header.Get("Upgrade"), "SPDY/3.1") {
			http.Error(w, "upgrade required", http.StatusBadRequest)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
		_ = rw.Flush()
		_, _ = io.Copy(conn, rw)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *streamingBackend) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.uris)
}

// upgrade sends an SPDY upgrade request for path over TLS to addr, expects 101, then
// checks that bytes written come back through the proxy.
func upgrade(t *testing.T, addr, method, path string) (int, string) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test server
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n", method, path, addr)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read upgrade response: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if _, err := io.WriteString(conn, "ping"); err != nil {
		t.Fatalf("write through the proxy: %v", err)
	}
	echo := make([]byte, 4)
	if _, err := io.ReadFull(br, echo); err != nil {
		t.Fatalf("read through the proxy: %v", err)
	}
	return resp.StatusCode, string(echo)
}

func TestExecAttachPortForwardProxyToTheStreamingServer(t *testing.T) {
	backend := newStreamingBackend(t)
	pods := &fakePods{
		pods:         []*corev1.Pod{testPod("ns1", "web", "uid-1")},
		streamingURL: backend.URL + "/exec/tok3n?x=1",
	}
	authn, authz := openAuth()
	s := startServer(t, Options{Client: (&reviews{}).clientset(t), Authentication: authn, Authorization: authz, Pods: pods})

	for _, tc := range []struct {
		method, path string
		want         *podsyncv1.GetStreamingURLRequest
	}{
		{
			http.MethodPost, "/exec/ns1/web/app?command=sh&command=-c&command=echo+hi&input=1&output=1&tty=1&error=1",
			&podsyncv1.GetStreamingURLRequest{PodUid: "uid-1", Container: "app", Kind: podsyncv1.StreamKind_STREAM_KIND_EXEC, Command: []string{"sh", "-c", "echo hi"}, Stdin: true, Stdout: true, Tty: true},
		},
		{
			http.MethodGet, "/exec/ns1/web/uid-1/app?command=ls&stdout=true&stderr=true",
			&podsyncv1.GetStreamingURLRequest{PodUid: "uid-1", Container: "app", Kind: podsyncv1.StreamKind_STREAM_KIND_EXEC, Command: []string{"ls"}, Stdout: true, Stderr: true},
		},
		{
			http.MethodPost, "/attach/ns1/web/app?output=1&error=1",
			&podsyncv1.GetStreamingURLRequest{PodUid: "uid-1", Container: "app", Kind: podsyncv1.StreamKind_STREAM_KIND_ATTACH, Stdout: true, Stderr: true},
		},
		{
			http.MethodPost, "/portForward/ns1/web",
			&podsyncv1.GetStreamingURLRequest{PodUid: "uid-1", Kind: podsyncv1.StreamKind_STREAM_KIND_PORT_FORWARD},
		},
		{
			http.MethodPost, "/portForward/ns1/web/uid-1",
			&podsyncv1.GetStreamingURLRequest{PodUid: "uid-1", Kind: podsyncv1.StreamKind_STREAM_KIND_PORT_FORWARD},
		},
	} {
		before := len(backend.seen())
		code, echo := upgrade(t, s.Address(), tc.method, tc.path)
		if code != http.StatusSwitchingProtocols || echo != "ping" {
			t.Errorf("%s %s: %d %q, want 101 and the echo", tc.method, tc.path, code, echo)
			continue
		}
		if got := pods.lastRequest(); !proto.Equal(got, tc.want) {
			t.Errorf("%s %s: streaming request %v, want %v", tc.method, tc.path, got, tc.want)
		}
		if seen := backend.seen(); len(seen) != before+1 || seen[before] != "/exec/tok3n?x=1" {
			t.Errorf("%s %s: backend saw %v, want one more request for /exec/tok3n?x=1", tc.method, tc.path, seen)
		}
	}

	// Refusals before any session starts.
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/exec/ns1/web/app?command=ls", http.StatusBadRequest},              // no stream
		{"/exec/ns1/nope/app?command=ls&output=1", http.StatusNotFound},      // unknown pod
		{"/exec/ns1/web/uid-2/app?command=ls&output=1", http.StatusNotFound}, // stale UID
		{"/portForward/ns1/web/uid-9", http.StatusNotFound},                  // stale UID
		{"/exec/ns1/web/a/b/c?output=1", http.StatusNotFound},                // no such route
		{"/run/ns1/web/app", http.StatusBadRequest},                          // no cmd
		{"/run/ns1/nope/app?cmd=ls", http.StatusNotFound},                    // unknown pod
	} {
		if code, body := upgrade(t, s.Address(), http.MethodPost, tc.path); code != tc.want {
			t.Errorf("POST %s: %d %q, want %d", tc.path, code, body, tc.want)
		}
	}

	// A plain request is forwarded nowhere: the session must be an upgrade, as on the kubelet.
	before := len(backend.seen())
	code, body := do(t, client(t), http.MethodPost, "https://"+s.Address()+"/exec/ns1/web/app?command=ls&output=1", "")
	if code != http.StatusBadRequest || !strings.Contains(body, "Upgrade request required") {
		t.Errorf("plain POST /exec: %d %q, want 400 Upgrade request required", code, body)
	}
	if len(backend.seen()) != before {
		t.Errorf("plain POST /exec reached the streaming server")
	}
}

func TestPortForwardWebsocketPorts(t *testing.T) {
	for _, tc := range []struct {
		values  []string
		want    []int32
		wantErr bool
	}{
		{[]string{"80"}, []int32{80}, false},
		{[]string{"80,443", "8080"}, []int32{80, 443, 8080}, false},
		{nil, nil, true},
		{[]string{"0"}, nil, true},
		{[]string{"70000"}, nil, true},
		{[]string{"http"}, nil, true},
	} {
		got, err := parsePorts(tc.values)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("parsePorts(%q) = %v, %v; want %v (error %v)", tc.values, got, err, tc.want, tc.wantErr)
		}
	}
}

// An exec session through the node API is closed once it carried nothing either way for
// streamingConnectionIdleTimeout, and not while it carries traffic.
func TestStreamingSessionsCloseWhenIdle(t *testing.T) {
	const idle = 500 * time.Millisecond
	backend := newStreamingBackend(t)
	pods := &fakePods{pods: []*corev1.Pod{testPod("ns1", "web", "uid-1")}, streamingURL: backend.URL + "/exec/tok3n"}
	authn, authz := openAuth()
	s := startServer(t, Options{Client: (&reviews{}).clientset(t), Authentication: authn, Authorization: authz, Pods: pods, StreamingIdleTimeout: idle})

	conn, err := tls.Dial("tcp", s.Address(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test server
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(conn, "POST /exec/ns1/web/app?command=sh&input=1&output=1 HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	// Traffic every fifth of the timeout, for three timeouts: the session stays.
	start, last := time.Now(), time.Now()
	for time.Since(start) < 3*idle {
		if _, err := io.WriteString(conn, "ping"); err != nil {
			t.Fatalf("after %s of traffic: write: %v", time.Since(start).Round(time.Millisecond), err)
		}
		echo := make([]byte, 4)
		if _, err := io.ReadFull(br, echo); err != nil {
			t.Fatalf("after %s of traffic: the session was closed: %v", time.Since(start).Round(time.Millisecond), err)
		}
		last = time.Now()
		time.Sleep(idle / 5)
	}
	// Then nothing: the node API closes it, long before the client's own deadline.
	_ = conn.SetReadDeadline(time.Now().Add(20 * idle))
	_, err = br.ReadByte()
	if err == nil {
		t.Fatal("the idle session carried a byte nobody sent")
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the session stayed open for %s without traffic; streamingConnectionIdleTimeout is %s", 20*idle, idle)
	}
	// The server's clock started when it relayed the last echo, just before it arrived.
	if waited := time.Since(last); waited < idle/2 {
		t.Errorf("closed %s after the last traffic, well before the timeout of %s", waited.Round(time.Millisecond), idle)
	}
}

// Sessions past the cap are refused with 429 until one ends; a huge header is refused.
func TestStreamingSessionsAndHeadersAreBounded(t *testing.T) {
	backend := newStreamingBackend(t)
	pods := &fakePods{pods: []*corev1.Pod{testPod("ns1", "web", "uid-1")}, streamingURL: backend.URL + "/exec/tok3n"}
	authn, authz := openAuth()
	s := startServer(t, Options{Client: (&reviews{}).clientset(t), Authentication: authn, Authorization: authz, Pods: pods, MaxStreamingSessions: 2})

	open := func() (net.Conn, int) {
		t.Helper()
		conn, err := tls.Dial("tcp", s.Address(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test server
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		fmt.Fprintf(conn, "POST /exec/ns1/web/app?command=sh&input=1&output=1 HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		return conn, resp.StatusCode
	}
	first, code1 := open()
	second, code2 := open()
	if code1 != http.StatusSwitchingProtocols || code2 != http.StatusSwitchingProtocols {
		t.Fatalf("two sessions under a cap of two: %d %d, want 101 twice", code1, code2)
	}
	third, code3 := open()
	third.Close()
	if code3 != http.StatusTooManyRequests {
		t.Errorf("a third session under a cap of two: %d, want 429", code3)
	}
	first.Close()
	waitUntil(t, 10*time.Second, "a session slot freed by the closed one", func() bool {
		c, code := open()
		c.Close()
		return code == http.StatusSwitchingProtocols
	})
	second.Close()

	req, _ := http.NewRequest(http.MethodGet, "https://"+s.Address()+"/healthz", nil)
	req.Header.Set("X-Padding", strings.Repeat("x", 2*maxHeaderBytes))
	resp, err := client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a %d-byte header: %d, want 431", 2*maxHeaderBytes, resp.StatusCode)
	}
}

func TestRunOutputIsBounded(t *testing.T) {
	b := syncBuffer{limit: 10}
	if _, err := b.Write([]byte("0123456789")); err != nil || b.Full() {
		t.Fatalf("a write up to the limit: %v, full %t", err, b.Full())
	}
	if _, err := b.Write([]byte("x")); err != errOutputLimit || !b.Full() {
		t.Fatalf("a write past the limit: %v, full %t; want errOutputLimit", err, b.Full())
	}
	if string(b.Bytes()) != "0123456789" {
		t.Errorf("kept %q", b.Bytes())
	}
}

// waitUntil polls cond every 50 ms until it holds or within passes.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
