package status

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"

	"github.com/unitlet/unitlet/shared/bus"
)

func TestNodeHealthNamesEachService(t *testing.T) {
	dir := t.TempDir()
	// certs is installed on this node (its socket is there), volumes and eviction are not.
	if err := os.WriteFile(bus.SocketPath(dir, "certs"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	asked := map[string]int{}
	down := map[string]bool{}
	now := time.Unix(1000, 0)
	h := newNodeHealth(dir, func() error { return nil })
	h.now = func() time.Time { return now }
	h.probe = func(_ context.Context, svc string) error {
		mu.Lock()
		defer mu.Unlock()
		asked[svc]++
		if down[svc] {
			return errors.New("unitlet-" + svc + " unreachable")
		}
		return nil
	}
	mux := http.NewServeMux()
	healthz.InstallHandler(mux, h.Checks()...)
	get := func() (int, string) {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return w.Code, w.Body.String()
	}

	if code, body := get(); code != http.StatusOK || body != "ok" {
		t.Fatalf("all healthy: %d %q", code, body)
	}
	if want := map[string]int{"config": 1, "podsync": 1, "certs": 1}; !maps.Equal(asked, want) {
		t.Errorf("asked %v, want %v: the required services and the installed optional one", asked, want)
	}

	// Polled again within the cache time: nobody is asked again.
	down["podsync"] = true
	if code, _ := get(); code != http.StatusOK || asked["podsync"] != 1 {
		t.Errorf("within %v: %d, podsync asked %d times, want the cached answer", nodeHealthCacheFor, code, asked["podsync"])
	}

	now = now.Add(nodeHealthCacheFor)
	code, body := get()
	if code != http.StatusInternalServerError || !strings.Contains(body, "[-]unitlet-podsync failed") || !strings.Contains(body, "[+]unitlet-config ok") {
		t.Errorf("podsync down: %d %q, want 500 naming unitlet-podsync", code, body)
	}

	// An optional service whose socket goes away stays expected.
	down["podsync"] = false
	down["certs"] = true
	if err := os.Remove(bus.SocketPath(dir, "certs")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(nodeHealthCacheFor)
	if code, body := get(); code != http.StatusInternalServerError || !strings.Contains(body, "[-]unitlet-certs failed") {
		t.Errorf("certs gone: %d %q, want 500 naming unitlet-certs", code, body)
	}
}

func TestNodeHealthSelf(t *testing.T) {
	h := newNodeHealth(t.TempDir(), func() error { return errors.New("node status loop stuck") })
	h.probe = func(context.Context, string) error { return nil }
	for _, c := range h.Checks() {
		err := c.Check(httptest.NewRequest(http.MethodGet, "/healthz", nil))
		if (c.Name() == "unitlet-status") != (err != nil) {
			t.Errorf("check %s: %v", c.Name(), err)
		}
	}
}
