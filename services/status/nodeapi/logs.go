package nodeapi

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/util/flushwriter"
)

const (
	// nodeLogDir is the directory /logs/ serves.
	nodeLogDir = "/var/log"
	// logQueryTimeout bounds one node log query, as the kubelet's.
	logQueryTimeout = 30 * time.Second
	// maxLogQueries bounds the node log queries (journalctl processes) running at once;
	// one more is refused with 429.
	maxLogQueries = 4
)

// systemLogRoutes installs /logs/ as the kubelet does with enableSystemLogHandler: the
// files under the log directory, and with enableSystemLogQuery the node log query
// (/logs/?query=<service or file>&sinceTime=&untilTime=&tailLines=&boot=&pattern=). Without
// the handler /logs/ answers 405.
func (s *Server) systemLogRoutes(mux *http.ServeMux) {
	if !s.opts.SystemLogHandler {
		mux.HandleFunc("/logs/", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "logs endpoint is disabled.", http.StatusMethodNotAllowed)
		})
		return
	}
	dir := s.opts.LogDir
	if dir == "" {
		dir = nodeLogDir
	}
	l := &systemLogs{
		dir:     dir,
		query:   s.opts.SystemLogQuery,
		journal: journal{cmd: s.opts.Journalctl, logDir: dir},
		running: make(chan struct{}, maxLogQueries),
	}
	if l.journal.cmd == "" {
		l.journal.cmd = "journalctl"
	}
	mux.Handle("GET /logs/", http.StripPrefix("/logs", l))
}

// systemLogs serves /logs/.
type systemLogs struct {
	dir     string
	query   bool // enableSystemLogQuery
	journal journal
	running chan struct{} // a token per query running
}

func (l *systemLogs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A parameter that does not parse (e.g. one with a ";") would be dropped by
	// r.URL.Query(), and the request answered as if it had not been asked.
	params, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		http.Error(w, fmt.Sprintf("bad query string: %v", err), http.StatusBadRequest)
		return
	}
	if !l.query {
		// The kubelet's file server ignores the query's parameters here; unitlet refuses
		// them, so that a query is never answered with something it did not ask for.
		for _, p := range logQueryParams {
			if params.Has(p) {
				http.Error(w, fmt.Sprintf("%s: the node log query is disabled on this node (enableSystemLogQuery: false)", p), http.StatusBadRequest)
				return
			}
		}
		l.serveFile(w, r)
		return
	}
	q, errs := parseLogQuery(params)
	if len(errs) > 0 {
		http.Error(w, errs.ToAggregate().Error(), http.StatusBadRequest)
		return
	}
	if q == nil {
		l.serveFile(w, r)
		return
	}
	if r.URL.Path != "/" && r.URL.Path != "" {
		http.Error(w, "path not allowed in query mode", http.StatusNotAcceptable)
		return
	}
	if errs := q.validate(l.dir); len(errs) > 0 {
		http.Error(w, errs.ToAggregate().Error(), http.StatusNotAcceptable)
		return
	}
	if len(q.Files) == 1 {
		r.URL.Path = "/" + strings.TrimPrefix(filepath.ToSlash(q.Files[0]), "/")
		l.serveFile(w, r)
		return
	}
	select {
	case l.running <- struct{}{}:
		defer func() { <-l.running }()
	default:
		http.Error(w, fmt.Sprintf("too many node log queries running (at most %d)", maxLogQueries), http.StatusTooManyRequests)
		return
	}
	l.serveJournal(w, r, q)
}

// serveJournal streams the journal of the query's services, for logQueryTimeout at most,
// gzipped when the client asks for gzip.
func (l *systemLogs) serveJournal(w http.ResponseWriter, r *http.Request, q *logQuery) {
	ctx, cancel := context.WithTimeout(r.Context(), logQueryTimeout)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain;charset=UTF-8")
	var out io.Writer = flushwriter.Wrap(w)
	if r.Header.Get("Accept-Encoding") == "gzip" {
		w.Header().Set("Content-Encoding", "gzip")
		gz, err := gzip.NewWriterLevel(out, gzip.BestSpeed)
		if err != nil {
			fmt.Fprintf(w, "\nfailed to get gzip writer: %v\n", err)
			return
		}
		defer gz.Close()
		out = gz
	}
	l.journal.copy(ctx, out, q)
}

// serveFile serves the file or directory listing of r.URL.Path under the log directory,
// opened without leaving it: a symbolic link that points out of it (or is absolute) is
// not followed, where the kubelet's file server follows it.
func (l *systemLogs) serveFile(w http.ResponseWriter, r *http.Request) {
	root, err := os.OpenRoot(l.dir)
	if err != nil {
		writeError(w, fmt.Errorf("open the log directory: %w", err))
		return
	}
	defer root.Close()
	http.FileServerFS(root.FS()).ServeHTTP(w, r)
}
