package pluginwatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Handler takes in the plugins of one type, as the kubelet's PluginHandler
// (pkg/kubelet/pluginmanager/cache/types.go): the Watcher calls ValidatePlugin, then
// RegisterPlugin if that passed, and DeRegisterPlugin once the plugin's socket is gone or
// another socket took its name. Calls for one plugin name never overlap.
type Handler interface {
	// ValidatePlugin refuses a plugin the handler cannot take (an unsupported version, a
	// duplicate); the error is sent to the plugin.
	ValidatePlugin(pluginName, endpoint string, versions []string) error
	// RegisterPlugin makes the plugin available to its consumers. timeout bounds the
	// handler's calls to the plugin; nil means the handler's own default.
	RegisterPlugin(pluginName, endpoint string, versions []string, timeout *time.Duration) error
	// DeRegisterPlugin withdraws a plugin RegisterPlugin took.
	DeRegisterPlugin(pluginName, endpoint string)
}

// Plugin is a registered plugin.
type Plugin struct {
	// Type is the plugin's type, the key of its Handler (CSIPlugin, DRAPlugin).
	Type string
	// Name is the plugin's name, unique within its type (a CSI driver's name).
	Name string
	// Endpoint is where the plugin's service listens: the socket the plugin gave, or
	// SocketPath when it gave none.
	Endpoint string
	// SocketPath is the registration socket the plugin was found through.
	SocketPath string
}

// The kubelet's timings (pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go
// and pkg/util/goroutinemap/exponentialbackoff/exponential_backoff.go at v1.36.3).
const (
	// dialTimeout bounds the connection to a plugin socket.
	dialTimeout = 10 * time.Second
	// getInfoTimeout bounds the GetInfo call.
	getInfoTimeout = time.Second
	// notifyTimeout bounds the NotifyRegistrationStatus call.
	notifyTimeout = 5 * time.Second
	// initialBackoff is the wait before the first new attempt after a failed registration;
	// each further failure doubles it up to maxBackoff.
	initialBackoff = 500 * time.Millisecond
	maxBackoff     = 2*time.Minute + 2*time.Second
)

// dirMode is the mode the registration directory is created with, as the kubelet's
// plugins_registry: other users have no business listing or reaching the sockets.
const dirMode fs.FileMode = 0o750

// errSocketGone ends the life of a socket: its file was removed, renamed away or replaced.
// A plugin registered from it is deregistered. Any other end (the Watcher stopping) leaves
// the plugin registered.
var errSocketGone = errors.New("plugin socket removed")

// Watcher finds plugin sockets in a directory tree and registers their plugins with the
// Handler for their type.
type Watcher struct {
	dir      string
	handlers map[string]Handler
	log      *slog.Logger

	// realDir is dir with symbolic links resolved: every socket must lie under it.
	realDir string
	// sockets holds the live socket at each path. Only Run's goroutine uses it.
	sockets map[string]*socket
	// workers counts the goroutines serving sockets; Run waits for them.
	workers sync.WaitGroup

	mu sync.Mutex
	// plugins holds the registered plugins by type and name.
	plugins map[pluginKey]*registration
	// pluginLocks serialises the handler calls for each plugin (see lockPlugin). Entries
	// are never removed: a node has a handful of plugin names.
	pluginLocks map[pluginKey]chan struct{}
}

// New returns a Watcher of dir (the kubelet's <root-dir>/plugins_registry) that gives each
// plugin to handlers[type] (keys are the pluginregistration/v1 types, CSIPlugin and
// DRAPlugin). A plugin of another type is told it cannot be registered.
func New(dir string, handlers map[string]Handler, log *slog.Logger) *Watcher {
	return &Watcher{
		dir:         filepath.Clean(dir),
		handlers:    maps.Clone(handlers),
		log:         log,
		sockets:     map[string]*socket{},
		plugins:     map[pluginKey]*registration{},
		pluginLocks: map[pluginKey]chan struct{}{},
	}
}

// Registered lists the registered plugins, ordered by type and name.
func (w *Watcher) Registered() []Plugin {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Plugin, 0, len(w.plugins))
	for _, r := range w.plugins {
		out = append(out, r.Plugin)
	}
	slices.SortFunc(out, func(a, b Plugin) int {
		return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// Run creates the directory if missing, registers the plugins of the sockets already in
// it and then of each new one, and deregisters those whose socket goes away, until ctx
// ends. Then it returns nil once the calls in flight have returned, leaving every plugin
// registered. A Watcher runs once.
func (w *Watcher) Run(ctx context.Context) error {
	if err := os.MkdirAll(w.dir, dirMode); err != nil {
		return fmt.Errorf("create plugin registration directory: %w", err)
	}
	realDir, err := filepath.EvalSymlinks(w.dir)
	if err != nil {
		return fmt.Errorf("resolve plugin registration directory: %w", err)
	}
	w.realDir = realDir

	events, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch plugin registration directory %s: %w", w.dir, err)
	}
	defer w.workers.Wait()
	defer events.Close()
	// Whatever ends Run ends the sockets' goroutines, without deregistering their plugins.
	ctx, stop := context.WithCancel(ctx)
	defer stop()

	// The watch is set before the walk so that no socket created meanwhile is missed; one
	// seen by both is registered once (see found).
	if err := w.watchTree(ctx, events, w.dir); err != nil {
		return err
	}
	w.log.Info("watching for plugin sockets", "dir", w.dir)

	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events.Events:
			if !ok {
				return fmt.Errorf("watch of plugin registration directory %s ended", w.dir)
			}
			w.handleEvent(ctx, events, ev)
		case err, ok := <-events.Errors:
			if !ok {
				return fmt.Errorf("watch of plugin registration directory %s ended", w.dir)
			}
			w.log.Error("plugin registration directory watch reported an error; a socket created or removed now may be missed until unitlet-volumes restarts", "dir", w.dir, "err", err)
		}
	}
}

// handleEvent follows one change in the tree.
func (w *Watcher) handleEvent(ctx context.Context, events *fsnotify.Watcher, ev fsnotify.Event) {
	if hidden(ev.Name) {
		w.log.Debug("ignoring hidden file", "path", ev.Name)
		return
	}
	switch {
	case ev.Has(fsnotify.Remove), ev.Has(fsnotify.Rename):
		// A rename event names the old path; the new one, if still in the tree, comes
		// as a create event.
		w.gone(ev.Name)
		if ev.Name == w.dir {
			// Reported only once no socket bound in it is open any more.
			w.log.Error("plugin registration directory removed; no plugin can register until unitlet-volumes restarts and creates it again", "dir", w.dir)
		}
	case ev.Has(fsnotify.Create):
		fi, err := os.Lstat(ev.Name)
		if err != nil {
			// Already gone again: the removal event follows.
			w.log.Debug("created file vanished", "path", ev.Name, "err", err)
			return
		}
		if fi.IsDir() {
			if err := w.watchTree(ctx, events, ev.Name); err != nil {
				w.log.Error("cannot watch new directory for plugin sockets; sockets in it are not registered until unitlet-volumes restarts", "dir", ev.Name, "err", err)
			}
			return
		}
		w.found(ctx, ev.Name)
	}
}

// watchTree watches dir and the directories under it and takes in the sockets found there.
// Only a failure to watch dir itself is returned; the rest is logged.
func (w *Watcher) watchTree(ctx context.Context, events *fsnotify.Watcher, dir string) error {
	if err := events.Add(dir); err != nil {
		return fmt.Errorf("watch %s for plugin sockets: %w", dir, err)
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return fmt.Errorf("list %s for plugin sockets: %w", dir, err)
			}
			w.log.Error("cannot read part of the plugin registration directory; plugins there are not registered", "path", path, "err", err)
			return nil
		}
		if path == dir {
			return nil
		}
		if hidden(path) {
			w.log.Debug("ignoring hidden file", "path", path)
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if err := events.Add(path); err != nil {
				w.log.Error("cannot watch directory for plugin sockets; sockets in it are not registered", "dir", path, "err", err)
				return filepath.SkipDir
			}
			return nil
		}
		w.found(ctx, path)
		return nil
	})
}

// hidden reports whether path's name starts with ".", which the kubelet leaves alone.
func hidden(path string) bool {
	return strings.HasPrefix(filepath.Base(path), ".")
}

// found takes in the file at path: a socket that passes checkSocket gets a goroutine that
// registers its plugin; anything else is refused with a log line.
func (w *Watcher) found(ctx context.Context, path string) {
	f, err := w.checkSocket(path)
	old := w.sockets[path]
	if old != nil && err == nil && old.id == f.id {
		// The same file, seen by both the walk and an event.
		return
	}
	if old != nil {
		// Something took the socket's place without a removal (renamed over it): the
		// old socket's plugin goes.
		old.end(errSocketGone)
		delete(w.sockets, path)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			w.log.Debug("created file vanished", "path", path, "err", err)
			return
		}
		w.log.Warn("refusing plugin socket", "path", path, "reason", err)
		return
	}
	sctx, end := context.WithCancelCause(ctx)
	s := &socket{socketFile: f, path: path, ctx: sctx, end: end}
	w.sockets[path] = s
	w.workers.Add(1)
	go func() {
		defer w.workers.Done()
		w.serve(ctx, s)
	}()
}

// gone ends the sockets at path and, when path was a directory, under it.
func (w *Watcher) gone(path string) {
	prefix := path + string(filepath.Separator)
	for p, s := range w.sockets {
		if p == path || strings.HasPrefix(p, prefix) {
			s.end(errSocketGone)
			delete(w.sockets, p)
		}
	}
}
