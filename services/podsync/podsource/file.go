package podsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
)

// dirSettle is how long WatchDir waits after the first change it is told of before it
// reads the directory again, so that a burst of writes (an editor saving, a tool writing
// several files) costs one read. It bounds the delay a change is seen with.
const dirSettle = 100 * time.Millisecond

// WatchDir sends the static pods defined by the files in dir to sink (source "file") until
// ctx ends: at once, within about dirSettle of any change fsnotify reports, and at every
// resync in any case. Like the kubelet it reads every regular file whatever its extension,
// following symlinks, and skips names starting with "." and subdirectories. A bad file is
// reported to rep and left out; when two files define the same pod, the first by file name
// wins and the other is reported. A missing dir is logged once and gives no pods; it is
// looked for again at every resync and watched once it appears. dir may also name a single
// manifest file, as the kubelet's staticPodPath may.
func WatchDir(ctx context.Context, dir, nodeName string, resync time.Duration, sink Sink, rep Reporter, log *slog.Logger) error {
	if resync <= 0 {
		return fmt.Errorf("watch static pod dir %s: resync period %v must be positive", dir, resync)
	}
	w := &dirWatcher{
		dir:      filepath.Clean(dir),
		nodeName: nodeName,
		sink:     sink,
		rep:      rep,
		log:      log.With("source", SourceFile, "dir", dir),
		reported: map[string]string{},
	}
	defer w.closeWatch()

	resyncTicker := time.NewTicker(resync)
	defer resyncTicker.Stop()
	settle := time.NewTimer(dirSettle)
	settle.Stop()
	settling := false

	w.scan()
	for {
		var events <-chan fsnotify.Event
		var watchErrs <-chan error
		if w.watch != nil {
			events, watchErrs = w.watch.Events, w.watch.Errors
		}
		select {
		case <-ctx.Done():
			return nil
		case <-resyncTicker.C:
			w.scan()
		case ev, ok := <-events:
			if !ok { // the watcher shut down on its own
				w.closeWatch()
				w.scan()
				continue
			}
			if filepath.Clean(ev.Name) == w.dir {
				// The directory itself went away. A directory made again under the same
				// name may reuse its inode, so the watch cannot be told stale later.
				if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
					w.closeWatch()
				}
			} else if strings.HasPrefix(filepath.Base(ev.Name), ".") {
				continue
			}
			// The first event starts the wait; later ones ride along, so a steady stream
			// of writes cannot hold the read off.
			if !settling {
				settling = true
				settle.Reset(dirSettle)
			}
		case err, ok := <-watchErrs:
			if ok {
				w.log.Warn("watching static pod dir failed; watching it anew", "err", err)
			}
			w.closeWatch()
			w.scan()
		case <-settle.C:
			settling = false
			w.scan()
		}
	}
}

type dirWatcher struct {
	dir      string
	nodeName string
	sink     Sink
	rep      Reporter
	log      *slog.Logger

	watch     *fsnotify.Watcher
	watchedAs os.FileInfo // the directory the watch is on, to notice it being replaced

	missingLogged bool
	// reported holds, per file, the error last reported for it, so that a bad file is
	// reported when it goes bad or changes, not at every read.
	reported map[string]string
	// last is what was sent last, by UID: a pod whose file has not changed is sent again
	// as the same object, keeping the time it was first seen.
	last map[string]*corev1.Pod
	sent []string // UIDs in the order last sent
}

// scan reads the directory and sends its pods when they differ from what was sent last.
func (w *dirWatcher) scan() {
	if o, ok := w.rep.(scanObserver); ok {
		defer o.Scanned()
	}
	info, err := os.Stat(w.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !w.missingLogged {
			w.log.Warn("static pod dir does not exist; looking again at every resync")
			w.missingLogged = true
		}
		w.closeWatch()
		clear(w.reported)
		w.send(nil)
		return
	case err != nil:
		w.log.Error("read static pod dir", "err", err)
		return
	case !info.IsDir() && !info.Mode().IsRegular():
		w.log.Error("static pod path is neither a directory nor a file")
		w.closeWatch()
		w.send(nil)
		return
	}
	if w.missingLogged {
		w.log.Info("static pod dir appeared")
		w.missingLogged = false
	}
	w.ensureWatch(info)

	// Read after the watch is in place, so a change made during the read is not missed.
	// The path may also name a single manifest file, as the kubelet allows.
	paths := []string{w.dir}
	if info.IsDir() {
		entries, err := os.ReadDir(w.dir)
		if err != nil {
			w.log.Error("read static pod dir", "err", err)
			return
		}
		paths = paths[:0]
		for _, e := range entries { // sorted by file name
			if !strings.HasPrefix(e.Name(), ".") {
				paths = append(paths, filepath.Join(w.dir, e.Name()))
			}
		}
	}
	now := time.Now()
	var pods []*corev1.Pod
	firstFile := map[string]string{} // namespace/name -> file that defined it
	present := map[string]bool{}
	for _, path := range paths {
		pod, err := w.readFile(path, now)
		if errors.Is(err, errSkip) {
			continue
		}
		present[path] = true
		if err != nil {
			w.bad(path, err)
			continue
		}
		key := pod.Namespace + "/" + pod.Name
		if first, dup := firstFile[key]; dup {
			w.bad(path, fmt.Errorf("static pod %s: pod %s is already defined by %s, ignoring this file", path, key, first))
			continue
		}
		firstFile[key] = path
		delete(w.reported, path)
		if prev, ok := w.last[string(pod.UID)]; ok {
			pod = prev
		}
		pods = append(pods, pod)
	}
	for path := range w.reported {
		if !present[path] {
			delete(w.reported, path)
		}
	}
	w.send(pods)
}

// errSkip marks a directory entry that is not a manifest (a subdirectory, a device, a
// file removed while the directory was read).
var errSkip = errors.New("not a manifest")

func (w *dirWatcher) readFile(path string, now time.Time) (*corev1.Pod, error) {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, errSkip
	case err != nil:
		return nil, fmt.Errorf("static pod %s: %w", path, err)
	case !info.Mode().IsRegular():
		w.log.Debug("skipping static pod dir entry that is not a regular file", "path", path, "mode", info.Mode())
		return nil, errSkip
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errSkip
	}
	if err != nil {
		return nil, fmt.Errorf("static pod %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("static pod %s: read: %w", path, err)
	}
	return staticPod(data, path, w.nodeName, SourceFile, now)
}

// bad reports a file unless the same error was reported for it last time.
func (w *dirWatcher) bad(path string, err error) {
	if w.reported[path] == err.Error() {
		return
	}
	w.reported[path] = err.Error()
	w.rep.BadManifest(SourceFile, path, err)
}

// send hands pods to the sink unless they are the pods sent last, in the same order.
func (w *dirWatcher) send(pods []*corev1.Pod) {
	uids := make([]string, len(pods))
	for i, p := range pods {
		uids[i] = string(p.UID)
	}
	if w.last != nil && slices.Equal(uids, w.sent) {
		return
	}
	w.last = make(map[string]*corev1.Pod, len(pods))
	for _, p := range pods {
		w.last[string(p.UID)] = p
	}
	w.sent = uids
	if pods == nil {
		pods = []*corev1.Pod{}
	}
	w.sink.SetPods(SourceFile, pods)
}

// ensureWatch watches the directory described by info, replacing a watch on a directory
// that has since been removed or replaced.
func (w *dirWatcher) ensureWatch(info os.FileInfo) {
	if w.watch != nil && os.SameFile(w.watchedAs, info) {
		return
	}
	w.closeWatch()
	watch, err := fsnotify.NewWatcher()
	if err != nil {
		w.log.Error("watch static pod dir; changes are seen at resync only", "err", err)
		return
	}
	if err := watch.Add(w.dir); err != nil {
		watch.Close()
		w.log.Error("watch static pod dir; changes are seen at resync only", "err", err)
		return
	}
	w.watch, w.watchedAs = watch, info
}

func (w *dirWatcher) closeWatch() {
	if w.watch != nil {
		w.watch.Close()
		w.watch, w.watchedAs = nil, nil
	}
}
