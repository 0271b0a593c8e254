package config

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// debounce lets an editor or a configuration manager finish writing before the reload.
const debounce = 250 * time.Millisecond

// WatchFiles reloads when the config file or a drop-in changes. It watches the directories,
// not the files, so that replacing a file by rename (what editors and atomic writers do) is
// seen, and so that a drop-in directory created later is picked up.
func (s *Service) WatchFiles(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch the configuration files: %w", err)
	}
	defer w.Close()

	dirs := map[string]bool{}
	if s.opts.ConfigFile != "" {
		dirs[filepath.Dir(s.opts.ConfigFile)] = true
	}
	if s.opts.ConfigDir != "" {
		dirs[filepath.Dir(s.opts.ConfigDir)] = true
	}
	if len(dirs) == 0 {
		<-ctx.Done()
		return nil
	}
	for d := range dirs {
		if err := w.Add(d); err != nil {
			s.log.Warn("cannot watch a configuration directory; reload with SIGHUP", "dir", d, "err", err)
		}
	}
	dropInWatched := false
	watchDropIns := func() {
		if s.opts.ConfigDir == "" || dropInWatched {
			return
		}
		if fi, err := os.Stat(s.opts.ConfigDir); err == nil && fi.IsDir() {
			if err := w.Add(s.opts.ConfigDir); err == nil {
				dropInWatched = true
			}
		}
	}
	watchDropIns()

	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.log.Warn("file watch error", "err", err)
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if !s.relevant(ev.Name) {
				continue
			}
			if ev.Name == s.opts.ConfigDir {
				if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
					dropInWatched = false
				}
				watchDropIns()
			}
			if timer == nil {
				timer = time.NewTimer(debounce)
			} else {
				timer.Reset(debounce)
			}
			fire = timer.C
		case <-fire:
			fire = nil
			_ = s.Reload(TriggerFileChange)
		}
	}
}

// relevant reports whether a change to path may change the configuration.
func (s *Service) relevant(path string) bool {
	switch {
	case s.opts.ConfigFile != "" && path == s.opts.ConfigFile:
		return true
	case s.opts.ConfigDir == "":
		return false
	case path == s.opts.ConfigDir:
		return true
	case filepath.Dir(path) == s.opts.ConfigDir:
		return filepath.Ext(path) == ".conf"
	}
	return false
}
