package podsource

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// watchLatency is what the brief promises: a change is seen within a second.
// watchLatency bounds waits for what must happen soon: generous, so a loaded machine does
// not fail the tests; no test asserts a speed.
const watchLatency = 10 * time.Second

// startWatchDir runs WatchDir until the test ends. The long resync makes sure changes are
// seen through fsnotify, not by rescanning.
func startWatchDir(t *testing.T, dir string, resync time.Duration) (*recordingSink, *recordingReporter) {
	t.Helper()
	sink, rep := newRecordingSink(), &recordingReporter{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := WatchDir(ctx, dir, testNode, resync, sink, rep, discardLogger()); err != nil {
			t.Errorf("WatchDir: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return sink, rep
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWatchDirLifecycle(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), podManifest("a", "busybox:1"))
	sink, _ := startWatchDir(t, dir, time.Hour)

	first := sink.waitFor(t, watchLatency, "initial pod a", namesAre("default/a-node-1"))[0]
	if first.Annotations[AnnotationConfigSource] != SourceFile {
		t.Errorf("config.source = %q, want file", first.Annotations[AnnotationConfigSource])
	}

	// Add: a second file, any extension.
	writeFile(t, filepath.Join(dir, "b.manifest"), podManifest("b", "busybox:1"))
	pods := sink.waitFor(t, watchLatency, "pod b added", namesAre("default/a-node-1", "default/b-node-1"))
	for _, p := range pods {
		if p.Name == "a-node-1" && p != first {
			t.Errorf("unchanged pod a was sent as a new object (seen %s, first %s)", p.Annotations[AnnotationConfigSeen], first.Annotations[AnnotationConfigSeen])
		}
	}

	// Change: a new UID.
	writeFile(t, filepath.Join(dir, "a.yaml"), podManifest("a", "busybox:2"))
	sink.waitFor(t, watchLatency, "pod a with a new UID", func(pods []*corev1.Pod) bool {
		for _, p := range pods {
			if p.Name == "a-node-1" {
				return p.UID != first.UID && p.Spec.Containers[0].Image == "busybox:2"
			}
		}
		return false
	})

	// Remove.
	if err := os.Remove(filepath.Join(dir, "b.manifest")); err != nil {
		t.Fatal(err)
	}
	sink.waitFor(t, watchLatency, "pod b removed", namesAre("default/a-node-1"))

	// Rename to a dotfile: ignored, so the pod goes.
	if err := os.Rename(filepath.Join(dir, "a.yaml"), filepath.Join(dir, ".a.yaml")); err != nil {
		t.Fatal(err)
	}
	sink.waitFor(t, watchLatency, "pod a gone once hidden", namesAre())
}

func TestWatchDirSkipsAndReports(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "good.yaml"), podManifest("good", "i"))
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), podManifest("hidden", "i"))
	writeFile(t, filepath.Join(dir, "a-first.yaml"), podManifest("dup", "first"))
	writeFile(t, filepath.Join(dir, "b-second.yaml"), podManifest("dup", "second"))
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub", "nested.yaml"), podManifest("nested", "i"))
	// Short resync: the same bad files read again and again must not be reported again.
	sink, rep := startWatchDir(t, dir, 50*time.Millisecond)

	pods := sink.waitFor(t, watchLatency, "good and first dup", namesAre("default/good-node-1", "default/dup-node-1"))
	for _, p := range pods {
		if p.Name == "dup-node-1" && p.Spec.Containers[0].Image != "first" {
			t.Errorf("duplicate name: kept the pod with image %s, want the first file's", p.Spec.Containers[0].Image)
		}
	}
	rep.waitFor(t, watchLatency, "b-second.yaml: static pod")
	if n := rep.matching("already defined by " + filepath.Join(dir, "a-first.yaml")); n != 1 {
		t.Errorf("duplicate reported %d times, want once naming the first file", n)
	}

	// A bad file is reported and skipped; the good ones stay.
	writeFile(t, filepath.Join(dir, "bad.yaml"), "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  containers: []\n")
	rep.waitFor(t, watchLatency, filepath.Join(dir, "bad.yaml")+": static pod")
	rep.waitScans(t, 5) // several resyncs
	if n := rep.matching("bad.yaml"); n != 1 {
		t.Errorf("bad file reported %d times over several rescans, want 1", n)
	}
	sink.waitFor(t, watchLatency, "good pods kept", namesAre("default/good-node-1", "default/dup-node-1"))
	if n := rep.matching("hidden") + rep.matching("nested"); n != 0 {
		t.Errorf("dotfile or subdirectory reported: %d", n)
	}

	// Fixing the bad file brings its pod in.
	writeFile(t, filepath.Join(dir, "bad.yaml"), podManifest("bad", "i"))
	sink.waitFor(t, watchLatency, "fixed pod", namesAre("default/good-node-1", "default/dup-node-1", "default/bad-node-1"))
}

func TestWatchDirMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	sink, _ := startWatchDir(t, dir, 100*time.Millisecond)

	// A missing directory is an empty source, not an error.
	sink.waitFor(t, watchLatency, "empty set for a missing dir", namesAre())

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "a.yaml"), podManifest("a", "i"))
	sink.waitFor(t, watchLatency, "pod from the new dir", namesAre("default/a-node-1"))

	// The directory going away empties the source.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	sink.waitFor(t, watchLatency, "empty set after the dir is removed", namesAre())

	// Recreated: watched again (a new inode).
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "b.yaml"), podManifest("b", "i"))
	sink.waitFor(t, watchLatency, "pod from the recreated dir", namesAre("default/b-node-1"))
}

func TestWatchDirRecreatedDirIsWatched(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// No resync within the test: only the watch can bring a change in.
	sink, rep := startWatchDir(t, dir, time.Hour)
	sink.waitFor(t, watchLatency, "empty set", namesAre())
	// A new directory takes the old one's place in one step (rename over an empty
	// directory), so no read can find the path missing. The old one's removal is an event;
	// the read after it finds the new directory and watches it.
	if err := os.Mkdir(dir+".new", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Rename(dir+".new", dir); err != nil { // os.Rename refuses a directory target
		t.Fatal(err)
	}
	rep.waitScans(t, 1)
	writeFile(t, filepath.Join(dir, "a.yaml"), podManifest("a", "i"))
	sink.waitFor(t, watchLatency, "pod in the recreated dir, through its watch", namesAre("default/a-node-1"))
}

func TestWatchDirSendsOnlyChanges(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), podManifest("a", "i"))
	sink, rep := startWatchDir(t, dir, 20*time.Millisecond)
	sink.waitFor(t, watchLatency, "pod a", namesAre("default/a-node-1"))
	rep.waitScans(t, 10)
	if n := sink.count(); n != 1 {
		t.Errorf("sink called %d times over many unchanged rescans, want 1", n)
	}
}

func TestWatchDirRejectsBadResync(t *testing.T) {
	if err := WatchDir(context.Background(), t.TempDir(), testNode, 0, newRecordingSink(), &recordingReporter{}, discardLogger()); err == nil {
		t.Error("WatchDir with resync 0: want an error")
	}
}

func TestWatchDirSingleFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pod.yaml")
	writeFile(t, path, podManifest("solo", "i:1"))
	sink, _ := startWatchDir(t, path, time.Hour)
	first := sink.waitFor(t, watchLatency, "pod from the file", namesAre("default/solo-node-1"))[0]
	writeFile(t, path, podManifest("solo", "i:2"))
	sink.waitFor(t, watchLatency, "changed pod", func(pods []*corev1.Pod) bool {
		return len(pods) == 1 && pods[0].UID != first.UID
	})
}
