// Package liveness tells a loop that still turns from one that is stuck, for a service's
// health check: each loop beats when it starts a round, and the check fails when a
// loop's last beat is older than the longest round it may take. A failing check stops the
// systemd watchdog's pings, so systemd restarts the service.
package liveness

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Loops records the beats of a service's loops.
type Loops struct {
	now   func() time.Time
	mu    sync.Mutex
	loops map[string]*loop
}

type loop struct {
	last    time.Time
	maxIdle time.Duration
}

// New returns Loops reading the time from now (time.Now in services, a fake in tests).
func New(now func() time.Time) *Loops {
	return &Loops{now: now, loops: map[string]*loop{}}
}

// Watch registers a loop that must beat at least every maxIdle; it counts as having
// beaten now.
func (l *Loops) Watch(name string, maxIdle time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loops[name] = &loop{last: l.now(), maxIdle: maxIdle}
}

// Beat records that the named loop is turning. An unknown name is ignored.
func (l *Loops) Beat(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lp := l.loops[name]; lp != nil {
		lp.last = l.now()
	}
}

// Check fails, naming each, when loops have not beaten within their maxIdle.
func (l *Loops) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var stuck []string
	for name, lp := range l.loops {
		if idle := now.Sub(lp.last); idle > lp.maxIdle {
			stuck = append(stuck, fmt.Sprintf("%s has not turned for %s (at most %s)", name, idle.Round(time.Second), lp.maxIdle))
		}
	}
	if len(stuck) == 0 {
		return nil
	}
	sort.Strings(stuck)
	return fmt.Errorf("stuck: %v", stuck)
}
