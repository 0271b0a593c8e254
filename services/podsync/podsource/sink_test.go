package podsource

import (
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// recordingSink keeps every set it is given, in order.
type recordingSink struct {
	mu   sync.Mutex
	sets [][]*corev1.Pod
	srcs []string
	ch   chan struct{}
}

func newRecordingSink() *recordingSink { return &recordingSink{ch: make(chan struct{}, 1)} }

func (s *recordingSink) SetPods(source string, pods []*corev1.Pod) {
	s.mu.Lock()
	s.sets = append(s.sets, pods)
	s.srcs = append(s.srcs, source)
	s.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

func (s *recordingSink) SetMirrorPods(pods []*corev1.Pod) { s.SetPods("mirror", pods) }

func (s *recordingSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sets)
}

func (s *recordingSink) last() ([]*corev1.Pod, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sets) == 0 {
		return nil, false
	}
	return s.sets[len(s.sets)-1], true
}

// waitFor waits until the latest set satisfies ok, and returns it.
func (s *recordingSink) waitFor(t *testing.T, within time.Duration, what string, ok func([]*corev1.Pod) bool) []*corev1.Pod {
	t.Helper()
	deadline := time.After(within)
	for {
		if pods, sent := s.last(); sent && ok(pods) {
			return pods
		}
		select {
		case <-s.ch:
		case <-deadline:
			pods, _ := s.last()
			t.Fatalf("after %v: %s not seen; last set: %v", within, what, podNames(pods))
			return nil
		}
	}
}

func podNames(pods []*corev1.Pod) []string {
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	sort.Strings(names)
	return names
}

func namesAre(want ...string) func([]*corev1.Pod) bool {
	sort.Strings(want)
	return func(pods []*corev1.Pod) bool { return strings.Join(podNames(pods), ",") == strings.Join(want, ",") }
}

// recordingReporter keeps every report.
type recordingReporter struct {
	mu      sync.Mutex
	reports []string // "source name: err"
	scans   int      // directory reads finished
}

// Scanned counts a read of the static pod directory.
func (r *recordingReporter) Scanned() {
	r.mu.Lock()
	r.scans++
	r.mu.Unlock()
}

// waitScans waits until n more reads of the directory have finished.
func (r *recordingReporter) waitScans(t *testing.T, n int) {
	t.Helper()
	r.mu.Lock()
	want := r.scans + n
	r.mu.Unlock()
	deadline := time.Now().Add(watchLatency)
	for {
		r.mu.Lock()
		got := r.scans
		r.mu.Unlock()
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d directory reads, want %d within %v", got, want, watchLatency)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *recordingReporter) BadManifest(source, name string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports = append(r.reports, source+" "+name+": "+err.Error())
}

func (r *recordingReporter) matching(sub string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rep := range r.reports {
		if strings.Contains(rep, sub) {
			n++
		}
	}
	return n
}

func (r *recordingReporter) waitFor(t *testing.T, within time.Duration, sub string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for r.matching(sub) == 0 {
		if time.Now().After(deadline) {
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("no report containing %q within %v; reports: %q", sub, within, r.reports)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func podManifest(name, image string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\nspec:\n  containers:\n  - name: c\n    image: " + image + "\n"
}
