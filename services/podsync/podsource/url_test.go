package podsource

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// manifestServer serves whatever body and status the test sets, and records a header.
type manifestServer struct {
	mu     sync.Mutex
	status int
	body   string
	header string
}

func (m *manifestServer) set(status int, body string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status, m.body = status, body
}

func (m *manifestServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.header = r.Header.Get("X-Node")
	w.WriteHeader(m.status)
	_, _ = w.Write([]byte(m.body))
}

func startPollURL(t *testing.T, srv *manifestServer) (*recordingSink, *recordingReporter, string) {
	t.Helper()
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	sink, rep := newRecordingSink(), &recordingReporter{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		header := http.Header{"X-Node": []string{testNode}}
		if err := PollURL(ctx, ts.URL, header, testNode, 30*time.Millisecond, sink, rep, discardLogger()); err != nil {
			t.Errorf("PollURL: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return sink, rep, ts.URL
}

func TestPollURL(t *testing.T) {
	srv := &manifestServer{status: http.StatusOK, body: podManifest("a", "i")}
	sink, rep, url := startPollURL(t, srv)

	first := sink.waitFor(t, time.Second, "single pod", namesAre("default/a-node-1"))[0]
	if first.Annotations[AnnotationConfigSource] != SourceHTTP {
		t.Errorf("config.source = %q, want http", first.Annotations[AnnotationConfigSource])
	}
	srv.mu.Lock()
	if srv.header != testNode {
		t.Errorf("header X-Node = %q, want %q", srv.header, testNode)
	}
	srv.mu.Unlock()

	// The server fails: reported once, the last good set stays.
	sent := sink.count()
	srv.set(http.StatusInternalServerError, "boom")
	rep.waitFor(t, time.Second, "500 Internal Server Error")
	time.Sleep(150 * time.Millisecond)
	if n := rep.matching("500"); n != 1 {
		t.Errorf("failure reported %d times, want once", n)
	}
	if sink.count() != sent {
		t.Errorf("sink called while the URL failed")
	}

	// Undecodable body: reported, set kept.
	srv.set(http.StatusOK, "apiVersion: v1\nkind: Secret\n")
	rep.waitFor(t, time.Second, `kind: "Secret"`)
	if sink.count() != sent {
		t.Errorf("sink called for an undecodable body")
	}

	// Recovery with the same pod: nothing new to send, and the pod keeps its identity.
	srv.set(http.StatusOK, podManifest("a", "i"))
	time.Sleep(150 * time.Millisecond)
	if sink.count() != sent {
		t.Errorf("sink called again for an unchanged set")
	}

	// A list: a bad item is reported and left out, the good ones are sent.
	srv.set(http.StatusOK, `{"apiVersion":"v1","kind":"PodList","items":[
	  {"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}},
	  {"metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"i"}]}},
	  {"metadata":{"name":"x"},"spec":{"containers":[]}}]}`)
	pods := sink.waitFor(t, time.Second, "list pods", namesAre("default/a-node-1", "default/b-node-1"))
	for _, p := range pods {
		if p.Name == "a-node-1" && p != first {
			t.Errorf("unchanged pod a was sent as a new object")
		}
	}
	rep.waitFor(t, time.Second, "items[2]")
	if rep.matching(url) == 0 {
		t.Errorf("reports do not name the URL")
	}

	// An empty body means no pods.
	srv.set(http.StatusOK, "")
	sink.waitFor(t, time.Second, "empty set", namesAre())
}

func TestPollURLNothingBeforeFirstSuccess(t *testing.T) {
	srv := &manifestServer{status: http.StatusNotFound}
	sink, rep, _ := startPollURL(t, srv)
	rep.waitFor(t, time.Second, "404")
	time.Sleep(100 * time.Millisecond)
	if n := sink.count(); n != 0 {
		t.Errorf("sink called %d times before any good fetch, want 0", n)
	}
	srv.set(http.StatusOK, podManifest("late", "i"))
	sink.waitFor(t, time.Second, "pod after recovery", namesAre("default/late-node-1"))
}
