package nodeapi

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"
)

// fakeJournalctl is a journalctl that lists unitlet-podsync.service among the journal's
// units and otherwise prints its arguments, one a line.
func fakeJournalctl(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "journalctl")
	script := `#!/bin/sh
if [ "$1" = --field ]; then echo unitlet-podsync.service; echo ssh.service; exit 0; fi
for a in "$@"; do echo "arg $a"; done
`
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// logsServer routes requests as the node API does (without its authentication) with a log
// directory holding syslog, kern.log and app/app.log, and a link out of it.
func logsServer(t *testing.T, o Options) (http.Handler, string) {
	t.Helper()
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	for name, data := range map[string]string{"syslog": "syslog line\n", "kern.log": "kernel line\n", "app/app.log": "app line\n", outside: "secret\n"} {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, name)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "escape.log")); err != nil {
		t.Fatal(err)
	}
	o.LogDir = dir
	if o.Journalctl == "" {
		o.Journalctl = fakeJournalctl(t)
	}
	s := &Server{opts: o}
	return s.routes(), dir
}

func get(h http.Handler, target string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec.Code, rec.Body.String()
}

// Each bad parameter is refused with the kubelet's status and a message naming it.
func TestLogQueryBadParameters(t *testing.T) {
	h, _ := logsServer(t, Options{SystemLogHandler: true, SystemLogQuery: true})
	for _, tc := range []struct {
		query string
		code  int
		want  string
	}{
		{"query=%20%20", http.StatusBadRequest, `query: Invalid value: ["  "]: may not be empty`},
		{"query=ssh&sinceTime=yesterday", http.StatusBadRequest, `sinceTime: Invalid value: "yesterday": invalid time format`},
		{"query=ssh&untilTime=2026-01-02", http.StatusBadRequest, `untilTime: Invalid value: "2026-01-02": invalid time format`},
		{"query=ssh&tailLines=ten", http.StatusBadRequest, `tailLines: Invalid value: "ten": strconv.Atoi: parsing "ten": invalid syntax`},
		{"query=ssh&boot=last", http.StatusBadRequest, `boot: Invalid value: "last"`},
		{"query=ssh&tailLines=-1", http.StatusNotAcceptable, "tailLines: Invalid value: -1: must be between 0 and 100000, inclusive"},
		{"query=ssh&tailLines=100001", http.StatusNotAcceptable, "tailLines: Invalid value: 100001: must be between 0 and 100000, inclusive"},
		{"query=ssh&boot=1", http.StatusNotAcceptable, "boot: Invalid value: 1: must be less than 1"},
		{"query=ssh&pattern=a(b", http.StatusNotAcceptable, "pattern: Invalid value: \"a(b\": error parsing regexp: missing closing )"},
		{"query=ssh%3Brm", http.StatusNotAcceptable, `query: Invalid value: "ssh;rm": input contains unsupported characters`},
		{"query=ssh;rm", http.StatusBadRequest, "bad query string: invalid semicolon separator in query"},
		{"query=--output=json", http.StatusNotAcceptable, `query: Invalid value: "--output=json": input contains unsupported characters`},
		{"query=" + strings.Repeat("a", 257), http.StatusNotAcceptable, "length must be less than 256"},
		{"query=a&query=b&query=c&query=d&query=e", http.StatusNotAcceptable, "query: Too many: 5: must have at most 4 items"},
		{"query=ssh&sinceTime=2026-01-02T00:00:00Z&untilTime=2026-01-01T00:00:00Z", http.StatusNotAcceptable, "untilTime: Invalid value: \"2026-01-01T00:00:00Z\": must be after `sinceTime`"},
		{"tailLines=5", http.StatusNotAcceptable, "query: Required value: cannot be empty with options"},
		{"query=app/app.log&query=ssh", http.StatusNotAcceptable, "cannot specify a file and service"},
		{"query=app/app.log&query=./kern.log", http.StatusNotAcceptable, "cannot specify more than one file"},
		{"query=app/app.log&tailLines=1", http.StatusNotAcceptable, "cannot specify file with options"},
		{"query=./missing.log", http.StatusNotAcceptable, "query: Invalid value: [\"./missing.log\"]"},
		// A file is named relative to the log directory, as on the kubelet.
		{"query=/syslog", http.StatusNotAcceptable, "path escapes from parent"},
		{"query=../../etc/passwd", http.StatusNotAcceptable, "path escapes from parent"},
	} {
		code, body := get(h, "/logs/?"+tc.query)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("/logs/?%s: %d %q, want %d with %q", tc.query, code, body, tc.code, tc.want)
		}
	}
	if code, body := get(h, "/logs/syslog?query=ssh"); code != http.StatusNotAcceptable || !strings.Contains(body, "path not allowed in query mode") {
		t.Errorf("a path with a query: %d %q, want 406 path not allowed in query mode", code, body)
	}
}

func TestJournalArgs(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600))
	until := time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC)
	q := &logQuery{logQueryOptions: logQueryOptions{SinceTime: &since, UntilTime: &until, TailLines: ptr.To(5), Boot: ptr.To(-1), Pattern: "err(or)?"}}
	got := journalArgs(q, []string{"ssh", "unitlet-podsync.service"})
	want := []string{"--utc", "--no-pager", "--output=short-precise",
		"--since=2026-01-02 02:04:05 UTC", "--until=2026-01-02 09:00:00 UTC",
		"--pager-end", "--lines=5", "--unit=ssh", "--unit=unitlet-podsync.service", "--grep=err(or)?", "--boot", "-1"}
	if !slices.Equal(got, want) {
		t.Errorf("journalArgs:\n got %q\nwant %q", got, want)
	}
	if got := journalArgs(&logQuery{}, []string{"ssh"}); !slices.Equal(got, []string{"--utc", "--no-pager", "--output=short-precise", "--unit=ssh"}) {
		t.Errorf("journalArgs without options: %q", got)
	}
}

// A query of a service in the journal runs journalctl with the query's arguments; one not
// in the journal reads its log file; a file query serves the file.
func TestLogQueryRuns(t *testing.T) {
	h, _ := logsServer(t, Options{SystemLogHandler: true, SystemLogQuery: true})
	code, body := get(h, "/logs/?query=unitlet-podsync&tailLines=5&pattern=ready&boot=0")
	if code != http.StatusOK || body != "arg --utc\narg --no-pager\narg --output=short-precise\narg --pager-end\narg --lines=5\narg --unit=unitlet-podsync\narg --grep=ready\narg --boot\narg 0\n" {
		t.Errorf("journal query: %d %q", code, body)
	}
	if code, body := get(h, "/logs/?query=app"); code != http.StatusOK || body != "app line\n" {
		t.Errorf("a service logging to /var/log/app/app.log: %d %q, want its file", code, body)
	}
	if code, body := get(h, "/logs/?query=kern"); code != http.StatusOK || body != "kernel line\n" {
		t.Errorf("a service logging to /var/log/kern.log: %d %q, want its file", code, body)
	}
	if code, body := get(h, "/logs/?query=nothing"); code != http.StatusOK || body != "\nlog not found for nothing\n" {
		t.Errorf("an unknown service: %d %q", code, body)
	}
	if code, body := get(h, "/logs/?query=app&tailLines=1"); code != http.StatusOK || !strings.Contains(body, "options present and query resolved to log files for [app]") {
		t.Errorf("options for a service logging to a file: %d %q", code, body)
	}
	if code, body := get(h, "/logs/?query=./syslog"); code != http.StatusOK || body != "syslog line\n" {
		t.Errorf("a file query: %d %q", code, body)
	}
	if code, body := get(h, "/logs/?query=app/app.log"); code != http.StatusOK || body != "app line\n" {
		t.Errorf("a file query in a directory: %d %q", code, body)
	}

	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/logs/?query=ssh", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	h.ServeHTTP(rec, req)
	zr, err := gzip.NewReader(rec.Body)
	if err != nil {
		t.Fatalf("gzip query: %v (%q)", err, rec.Body.String())
	}
	plain, _ := io.ReadAll(zr)
	if rec.Header().Get("Content-Encoding") != "gzip" || !strings.Contains(string(plain), "arg --unit=ssh\n") {
		t.Errorf("gzip query: %q %q", rec.Header().Get("Content-Encoding"), plain)
	}

	h, _ = logsServer(t, Options{SystemLogHandler: true, SystemLogQuery: true, Journalctl: filepath.Join(t.TempDir(), "none")})
	if code, body := get(h, "/logs/?query=ssh"); code != http.StatusOK || !strings.Contains(body, "log not found for ssh") {
		t.Errorf("no journalctl: %d %q, want the file fallback", code, body)
	}
}

// /logs/<file> serves files under the log directory and never one out of it.
func TestSystemLogFiles(t *testing.T) {
	for _, query := range []bool{false, true} {
		h, _ := logsServer(t, Options{SystemLogHandler: true, SystemLogQuery: query})
		if code, body := get(h, "/logs/syslog"); code != http.StatusOK || body != "syslog line\n" {
			t.Errorf("query %v: /logs/syslog: %d %q", query, code, body)
		}
		if code, body := get(h, "/logs/"); code != http.StatusOK || !strings.Contains(body, `href="syslog"`) {
			t.Errorf("query %v: /logs/: %d %q, want a listing", query, code, body)
		}
		if code, body := get(h, "/logs/escape.log"); code == http.StatusOK || strings.Contains(body, "secret") {
			t.Errorf("query %v: a link out of the log directory: %d %q", query, code, body)
		}
		if code, body := get(h, "/logs/../../etc/passwd"); code == http.StatusOK || strings.Contains(body, "root:") {
			t.Errorf("query %v: /logs/../../etc/passwd: %d %q", query, code, body)
		}
	}
}

// Without enableSystemLogQuery a query is refused naming its parameter; without
// enableSystemLogHandler, or without the debugging handlers, /logs/ answers 405.
func TestSystemLogDisabled(t *testing.T) {
	h, _ := logsServer(t, Options{SystemLogHandler: true})
	if code, body := get(h, "/logs/?query=ssh"); code != http.StatusBadRequest || !strings.Contains(body, "query: the node log query is disabled on this node (enableSystemLogQuery: false)") {
		t.Errorf("a query with enableSystemLogQuery false: %d %q", code, body)
	}
	if code, body := get(h, "/logs/syslog?tailLines=3"); code != http.StatusBadRequest || !strings.Contains(body, "tailLines: ") {
		t.Errorf("an option with enableSystemLogQuery false: %d %q", code, body)
	}
	h, _ = logsServer(t, Options{SystemLogQuery: true})
	if code, body := get(h, "/logs/syslog"); code != http.StatusMethodNotAllowed || body != "logs endpoint is disabled.\n" {
		t.Errorf("enableSystemLogHandler false: %d %q", code, body)
	}
	h, _ = logsServer(t, Options{SystemLogHandler: true, SystemLogQuery: true, DisableDebuggingHandlers: true})
	if code, body := get(h, "/logs/?query=ssh"); code != http.StatusMethodNotAllowed || body != "Debug endpoints are disabled.\n" {
		t.Errorf("enableDebuggingHandlers false: %d %q", code, body)
	}
}
