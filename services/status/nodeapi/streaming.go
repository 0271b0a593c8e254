package nodeapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/proxy"
	translator "k8s.io/apiserver/pkg/util/proxy"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

// streamOptions are the exec and attach stream flags of a request.
type streamOptions struct {
	stdin, stdout, stderr, tty bool
}

// parseStreamOptions reads the kubelet's query flags (input, output, error, tty; the API
// server sends "1") and accepts stdin, stdout and stderr as other names for the first three.
// A tty carries no separate stderr; at least one stream is required.
func parseStreamOptions(q url.Values) (streamOptions, error) {
	flag := func(names ...string) bool {
		for _, n := range names {
			if v := q.Get(n); v != "" {
				b, err := strconv.ParseBool(v)
				return err == nil && b
			}
		}
		return false
	}
	o := streamOptions{
		stdin:  flag(corev1.ExecStdinParam, "stdin"),
		stdout: flag(corev1.ExecStdoutParam, "stdout"),
		stderr: flag(corev1.ExecStderrParam, "stderr"),
		tty:    flag(corev1.ExecTTYParam),
	}
	if o.tty {
		o.stderr = false
	}
	if !o.stdin && !o.stdout && !o.stderr {
		return o, errors.New("you must specify at least 1 of stdin, stdout, stderr")
	}
	return o, nil
}

// resolvePod finds the UID of the pod the request names and checks the UID in the path
// (when there is one) against it.
func (s *Server) resolvePod(r *http.Request) (types.UID, error) {
	namespace, name := r.PathValue("namespace"), r.PathValue("pod")
	uid, err := s.opts.Pods.PodUID(r.Context(), namespace, name)
	if err != nil {
		return "", err
	}
	if want := r.PathValue("uid"); want != "" && types.UID(want) != uid {
		return "", apierrors.NewNotFound(corev1.Resource("pods"), namespace+"/"+name)
	}
	return uid, nil
}

// streamingURL asks podsync for the session's URL.
func (s *Server) streamingURL(r *http.Request, req *podsyncv1.GetStreamingURLRequest) (*url.URL, error) {
	raw, err := s.opts.Pods.StreamingURL(r.Context(), req)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parse streaming URL %q: %w", raw, err)
	}
	return u, nil
}

func (s *Server) getExec(w http.ResponseWriter, r *http.Request) {
	s.serveStream(w, r, podsyncv1.StreamKind_STREAM_KIND_EXEC)
}

func (s *Server) getAttach(w http.ResponseWriter, r *http.Request) {
	s.serveStream(w, r, podsyncv1.StreamKind_STREAM_KIND_ATTACH)
}

// serveStream proxies an exec or attach session to the runtime's streaming server. A
// websocket client speaking v5.channel.k8s.io is translated to the runtime's SPDY.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, kind podsyncv1.StreamKind) {
	opts, err := parseStreamOptions(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	uid, err := s.resolvePod(r)
	if err != nil {
		writeError(w, err)
		return
	}
	req := &podsyncv1.GetStreamingURLRequest{
		PodUid:    string(uid),
		Container: r.PathValue("container"),
		Kind:      kind,
		Stdin:     opts.stdin,
		Stdout:    opts.stdout,
		Stderr:    opts.stderr,
		Tty:       opts.tty,
	}
	if kind == podsyncv1.StreamKind_STREAM_KIND_EXEC {
		req.Command = r.URL.Query()[corev1.ExecCommandParam]
	}
	location, err := s.streamingURL(r, req)
	if err != nil {
		writeError(w, err)
		return
	}
	var handler http.Handler = proxy.NewUpgradeAwareHandler(location, nil, false, true, proxyResponder{s})
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		handler = translator.NewStreamTranslatorHandler(location, nil, 0, translator.Options{
			Stdin: opts.stdin, Stdout: opts.stdout, Stderr: opts.stderr, Tty: opts.tty,
		})
	}
	handler.ServeHTTP(w, r)
}

// getPortForward proxies a port-forward session. Over SPDY the ports travel in each
// stream's headers, so the URL may name none; a plain websocket names them in "port".
func (s *Server) getPortForward(w http.ResponseWriter, r *http.Request) {
	tunneling := wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
	var ports []int32
	if !tunneling && wsstream.IsWebSocketRequest(r) {
		var err error
		if ports, err = parsePorts(r.URL.Query()[corev1.PortHeader]); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	uid, err := s.resolvePod(r)
	if err != nil {
		writeError(w, err)
		return
	}
	location, err := s.streamingURL(r, &podsyncv1.GetStreamingURLRequest{
		PodUid: string(uid),
		Kind:   podsyncv1.StreamKind_STREAM_KIND_PORT_FORWARD,
		Ports:  ports,
	})
	if err != nil {
		writeError(w, err)
		return
	}
	var handler http.Handler = proxy.NewUpgradeAwareHandler(location, nil, false, true, proxyResponder{s})
	if tunneling {
		handler = translator.NewTunnelingHandler(handler)
	}
	handler.ServeHTTP(w, r)
}

// parsePorts reads "port" values, each one port or a comma-separated list.
func parsePorts(values []string) ([]int32, error) {
	if len(values) == 0 {
		return nil, fmt.Errorf("query parameter %q is required", corev1.PortHeader)
	}
	var ports []int32
	for _, v := range values {
		for p := range strings.SplitSeq(v, ",") {
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil || n == 0 {
				return nil, fmt.Errorf("bad port %q: must be 1-65535", p)
			}
			ports = append(ports, int32(n))
		}
	}
	return ports, nil
}

// postRun runs a command (query "cmd", split on spaces) in a container and answers with
// its combined output. The runtime's streaming exec carries it, as kubectl exec would.
func (s *Server) postRun(w http.ResponseWriter, r *http.Request) {
	cmd := strings.Fields(r.URL.Query().Get("cmd"))
	if len(cmd) == 0 {
		http.Error(w, `query parameter "cmd" is required`, http.StatusBadRequest)
		return
	}
	uid, err := s.resolvePod(r)
	if err != nil {
		writeError(w, err)
		return
	}
	location, err := s.streamingURL(r, &podsyncv1.GetStreamingURLRequest{
		PodUid:    string(uid),
		Container: r.PathValue("container"),
		Kind:      podsyncv1.StreamKind_STREAM_KIND_EXEC,
		Command:   cmd,
		Stdout:    true,
		Stderr:    true,
	})
	if err != nil {
		writeError(w, err)
		return
	}
	exec, err := remotecommand.NewSPDYExecutor(&restclient.Config{}, http.MethodPost, location)
	if err != nil {
		writeError(w, fmt.Errorf("prepare exec: %w", err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), runTimeout)
	defer cancel()
	out := syncBuffer{limit: runOutputLimit}
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out}); err != nil {
		switch {
		case out.Full():
			http.Error(w, fmt.Sprintf("run %v in %s/%s: the output exceeds %d bytes; use exec to stream it", cmd, r.PathValue("pod"), r.PathValue("container"), runOutputLimit), http.StatusRequestEntityTooLarge)
		case ctx.Err() == context.DeadlineExceeded:
			http.Error(w, fmt.Sprintf("run %v in %s/%s: not done within %s; use exec for long commands", cmd, r.PathValue("pod"), r.PathValue("container"), runTimeout), http.StatusGatewayTimeout)
		default:
			writeError(w, fmt.Errorf("run %v in %s/%s: %w", cmd, r.PathValue("pod"), r.PathValue("container"), err))
		}
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if _, err := w.Write(out.Bytes()); err != nil {
		s.log.Debug("write response", "err", err)
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent stdout and stderr copies, that
// refuses to grow past limit bytes (0: no limit).
type syncBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int
	full  bool
}

// errOutputLimit ends a /run whose output outgrew its buffer.
var errOutputLimit = errors.New("output limit reached")

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit > 0 && b.buf.Len()+len(p) > b.limit {
		b.full = true
		return 0, errOutputLimit
	}
	return b.buf.Write(p)
}

// Full reports whether a write was refused for the limit.
func (b *syncBuffer) Full() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.full
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Bytes()
}

// proxyResponder answers a failed proxy with 500 and logs why.
type proxyResponder struct{ s *Server }

func (p proxyResponder) Error(w http.ResponseWriter, r *http.Request, err error) {
	p.s.log.Info("proxy streaming request", "path", r.URL.Path, "err", err)
	writeError(w, err)
}
