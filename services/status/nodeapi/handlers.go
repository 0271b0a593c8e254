package nodeapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/apiserver/pkg/util/flushwriter"
)

// routes is every endpoint; anything else is 404. As the v1.36 kubelet: /healthz, /pods,
// /stats/ and the /metrics endpoints always; /configz, the debugging handlers (container
// logs, exec, attach, port forwarding, run) and /logs/ only with enableDebuggingHandlers.
// Without them those paths, /runningpods/ and /debug/pprof/ answer 405 and /configz 404.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()

	healthz.InstallHandler(mux, s.healthChecks()...)

	mux.HandleFunc("GET /pods", s.getPods)

	if s.opts.DisableDebuggingHandlers {
		disabled := func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "Debug endpoints are disabled.", http.StatusMethodNotAllowed)
		}
		for _, p := range []string{"/run/", "/exec/", "/attach/", "/portForward/", "/containerLogs/", "/runningpods/", "/debug/pprof/", "/logs/"} {
			mux.HandleFunc(p, disabled)
		}
	} else {
		s.debuggingRoutes(mux)
		s.systemLogRoutes(mux)
		// The kubelet's profiling and log-verbosity handlers with enableProfilingHandler
		// and enableDebugFlagsHandler false; unitlet serves neither, whatever they say.
		mux.HandleFunc("/debug/pprof/", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "profiling endpoint is disabled.", http.StatusMethodNotAllowed)
		})
		mux.HandleFunc("/debug/flags/v", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "flags endpoint is disabled.", http.StatusMethodNotAllowed)
		})
		if s.opts.Configz != nil {
			mux.HandleFunc("GET /configz", s.getConfigz)
		}
	}

	if s.opts.Stats != nil {
		mux.HandleFunc("GET /stats/summary", s.getStatsSummary)
	}
	if s.opts.Metrics != nil {
		mux.Handle("GET /metrics", s.opts.Metrics)
	}
	if s.opts.ResourceMetrics != nil {
		mux.Handle("GET /metrics/resource", s.opts.ResourceMetrics)
	}
	if s.opts.CAdvisorMetrics != nil {
		mux.Handle("GET /metrics/cadvisor", s.opts.CAdvisorMetrics)
	}
	if s.opts.ProbeMetrics != nil {
		mux.Handle("GET /metrics/probes", s.opts.ProbeMetrics)
	}
	return mux
}

// healthChecks are /healthz's checks: ping, and the node agent's.
func (s *Server) healthChecks() []healthz.HealthChecker {
	return append([]healthz.HealthChecker{healthz.PingHealthz}, s.opts.HealthChecks...)
}

// debuggingRoutes are the kubelet's debugging handlers: container logs, exec, attach,
// port forwarding and run.
func (s *Server) debuggingRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.getContainerLogs)
	idle := s.opts.StreamingIdleTimeout
	for _, p := range []string{"/exec/{namespace}/{pod}/{container}", "/exec/{namespace}/{pod}/{uid}/{container}"} {
		mux.HandleFunc("GET "+p, s.limitSessions(withIdleTimeout(idle, s.getExec)))
		mux.HandleFunc("POST "+p, s.limitSessions(withIdleTimeout(idle, s.getExec)))
	}
	for _, p := range []string{"/attach/{namespace}/{pod}/{container}", "/attach/{namespace}/{pod}/{uid}/{container}"} {
		mux.HandleFunc("GET "+p, s.limitSessions(withIdleTimeout(idle, s.getAttach)))
		mux.HandleFunc("POST "+p, s.limitSessions(withIdleTimeout(idle, s.getAttach)))
	}
	for _, p := range []string{"/portForward/{namespace}/{pod}", "/portForward/{namespace}/{pod}/{uid}"} {
		mux.HandleFunc("GET "+p, s.limitSessions(withIdleTimeout(idle, s.getPortForward)))
		mux.HandleFunc("POST "+p, s.limitSessions(withIdleTimeout(idle, s.getPortForward)))
	}
	for _, p := range []string{"/run/{namespace}/{pod}/{container}", "/run/{namespace}/{pod}/{uid}/{container}"} {
		mux.HandleFunc("POST "+p, s.limitSessions(s.postRun))
	}
}

// writeError answers with the status an apierrors error carries (404 for NotFound, 400
// for BadRequest, ...) or 500, and the error's message as plain text.
func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code != 0 {
		code = int(status.Status().Code)
	}
	http.Error(w, err.Error(), code)
}

// writeJSON answers 200 with v as JSON.
func (s *Server) writeJSON(w http.ResponseWriter, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		writeError(w, fmt.Errorf("encode response: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(data); err != nil {
		s.log.Debug("write response", "err", err)
	}
}

func (s *Server) getPods(w http.ResponseWriter, r *http.Request) {
	pods, err := s.opts.Pods.Pods(r.Context())
	if err != nil {
		writeError(w, fmt.Errorf("list pods: %w", err))
		return
	}
	list := corev1.PodList{
		TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
		Items:    make([]corev1.Pod, 0, len(pods)),
	}
	for _, p := range pods {
		list.Items = append(list.Items, *p)
	}
	s.writeJSON(w, &list)
}

func (s *Server) getStatsSummary(w http.ResponseWriter, r *http.Request) {
	onlyCPUAndMemory := false
	if v := r.URL.Query().Get("only_cpu_and_memory"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			http.Error(w, fmt.Sprintf("bad only_cpu_and_memory %q: %v", v, err), http.StatusBadRequest)
			return
		}
		onlyCPUAndMemory = b
	}
	summary, err := s.opts.Stats.Summary(r.Context(), onlyCPUAndMemory)
	if err != nil {
		writeError(w, fmt.Errorf("build stats summary: %w", err))
		return
	}
	s.writeJSON(w, summary)
}

func (s *Server) getConfigz(w http.ResponseWriter, _ *http.Request) {
	body, err := s.opts.Configz()
	if err != nil {
		writeError(w, fmt.Errorf("read configuration: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(body); err != nil {
		s.log.Debug("write response", "err", err)
	}
}

func (s *Server) getContainerLogs(w http.ResponseWriter, r *http.Request) {
	if s.opts.Logs == nil {
		http.NotFound(w, r)
		return
	}
	namespace, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	opts, err := podLogOptions(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := validatePodLogOptions(opts); err != nil {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	opts.Container = container
	if _, ok := w.(http.Flusher); !ok {
		http.Error(w, "response cannot be flushed, cannot stream logs", http.StatusInternalServerError)
		return
	}
	out := &logWriter{w: flushwriter.Wrap(w)}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	err = s.opts.Logs.ContainerLogs(r.Context(), namespace, pod, container, opts, out, out)
	switch {
	case err == nil:
	case !out.started():
		writeError(w, err)
	default:
		// The status line is sent; the client sees the log end early.
		s.log.Info("stream container log", "namespace", namespace, "pod", pod, "container", container, "err", err)
	}
}

// logWriter serializes writes of stdout and stderr to one response and remembers whether
// anything was written (after which an error can no longer change the status).
type logWriter struct {
	mu    sync.Mutex
	w     io.Writer
	wrote bool
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wrote = true
	return l.w.Write(p)
}

func (l *logWriter) started() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wrote
}

// podLogOptions decodes the /containerLogs query as the API server's v1 PodLogOptions
// parameters: follow, previous, timestamps, sinceSeconds, sinceTime, tailLines,
// limitBytes, insecureSkipTLSVerifyBackend, stream; and the legacy "tail" ("all" = no limit).
func podLogOptions(q url.Values) (*corev1.PodLogOptions, error) {
	if tail, ok := q["tail"]; ok && len(tail) > 0 && tail[0] != "" {
		q = cloneValues(q)
		if tail[0] == "all" {
			delete(q, "tailLines")
		} else {
			q["tailLines"] = tail[:1]
		}
	}
	opts := &corev1.PodLogOptions{}
	boolParam := func(name string, out *bool) {
		if v, ok := q[name]; ok && len(v) > 0 {
			_ = runtime.Convert_Slice_string_To_bool(&v, out, nil)
		}
	}
	boolParam("follow", &opts.Follow)
	boolParam("previous", &opts.Previous)
	boolParam("timestamps", &opts.Timestamps)
	boolParam("insecureSkipTLSVerifyBackend", &opts.InsecureSkipTLSVerifyBackend)
	for name, out := range map[string]**int64{
		"sinceSeconds": &opts.SinceSeconds,
		"tailLines":    &opts.TailLines,
		"limitBytes":   &opts.LimitBytes,
	} {
		if v, ok := q[name]; ok && len(v) > 0 {
			if err := runtime.Convert_Slice_string_To_Pointer_int64(&v, out, nil); err != nil {
				return nil, fmt.Errorf("bad %s %q: %w", name, v[0], err)
			}
		}
	}
	if v, ok := q["sinceTime"]; ok && len(v) > 0 {
		if err := metav1.Convert_Slice_string_To_Pointer_v1_Time(&v, &opts.SinceTime, nil); err != nil {
			return nil, fmt.Errorf("bad sinceTime %q: %w", v[0], err)
		}
	}
	if v, ok := q["stream"]; ok && len(v) > 0 {
		stream := v[0]
		opts.Stream = &stream
	}
	return opts, nil
}

func cloneValues(q url.Values) url.Values {
	c := make(url.Values, len(q))
	for k, v := range q {
		c[k] = v
	}
	return c
}

// validatePodLogOptions rejects what the API server's validation rejects. Selecting one
// stream is refused as by the kubelet without its alpha PodLogsQuerySplitStreams gate.
func validatePodLogOptions(o *corev1.PodLogOptions) error {
	switch {
	case o.TailLines != nil && *o.TailLines < 0:
		return fmt.Errorf("tailLines %d: must be greater than or equal to 0", *o.TailLines)
	case o.LimitBytes != nil && *o.LimitBytes < 1:
		return fmt.Errorf("limitBytes %d: must be greater than 0", *o.LimitBytes)
	case o.SinceSeconds != nil && o.SinceTime != nil:
		return errors.New("at most one of sinceTime or sinceSeconds may be specified")
	case o.SinceSeconds != nil && *o.SinceSeconds < 1:
		return fmt.Errorf("sinceSeconds %d: must be greater than 0", *o.SinceSeconds)
	case o.Stream != nil:
		return errors.New("stream may not be specified")
	}
	return nil
}
