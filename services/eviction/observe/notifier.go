package observe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Notifier tells at once when a memory signal crosses a threshold, so that eviction need
// not wait for its next periodic observation.
type Notifier interface {
	// Set arms the notifier for the signal's available bytes crossing threshold (in
	// either direction), replacing any earlier threshold. Like the kubelet, call it again
	// every few observations (the kubelet: every 10 s at most), since on cgroup v1 the
	// threshold is placed on usage and moves with the inactive file pages.
	Set(thresholdAvailableBytes int64) error
	// C receives a value when the threshold is crossed; crossings that come while one is
	// waiting to be received are merged into it. It is closed by Close.
	C() <-chan struct{}
	// Close disarms the notifier and releases what it holds.
	Close() error
}

// MemoryNotifier returns a notifier for memory.available.
//
// On cgroup v1 it is the kubelet's: a memory cgroup threshold event (an eventfd registered
// in cgroup.event_control) on the root memory cgroup's memory.usage_in_bytes, placed at
// MemTotal - threshold + inactive file pages, the usage at which the working set leaves
// exactly threshold available. The kernel signals the crossing as it happens.
//
// Cgroup v2 has no usage threshold notification (the kubelet's notifier is disabled there).
// This one then samples memory.available every second, computed as Node computes it (root
// memory.stat and /proc/meminfo, a few file reads), and signals when it crosses the
// threshold in either direction, as the v1 event does. It measures the same number as the
// signal, not a proxy such as PSI or memory.events, so the crossing it reports is the one
// eviction acts on; a second is far below the eviction loop's 10 s period, for the cost of
// reading two small files once a second. The sampler also serves on v1 when the cgroup's
// cgroup.event_control cannot be written (a read-only cgroup mount in a container).
func (s *Source) MemoryNotifier() (Notifier, error) {
	return s.notifier(s.h.memory, s.rootMemoryUse), nil
}

// AllocatableMemoryNotifier is MemoryNotifier for allocatableMemory.available: on cgroup
// v1 the event is on the kubepods cgroup (the kubelet's allocatable notifier), on v2 the
// signal is sampled.
func (s *Source) AllocatableMemoryNotifier() (Notifier, error) {
	return s.notifier(filepath.Join(s.h.memory, s.kubepods), s.allocatableMemoryUse), nil
}

// notifier is the threshold event on the v1 memory cgroup dir when its event_control can
// be written, else a sampler of the signal measure computes.
func (s *Source) notifier(dir string, measure func() (Value, memoryUse, error)) Notifier {
	if !s.h.unified {
		if f, err := os.OpenFile(filepath.Join(dir, "cgroup.event_control"), os.O_WRONLY, 0); err == nil {
			f.Close()
			return &eventNotifier{dir: dir, measure: measure, ch: make(chan struct{}, 1)}
		}
	}
	return s.newSampler(func() (Value, error) {
		v, _, err := measure()
		return v, err
	})
}

// eventNotifier is the cgroup v1 memory threshold event on one cgroup.
type eventNotifier struct {
	dir     string
	measure func() (Value, memoryUse, error)
	ch      chan struct{}

	mu      sync.Mutex
	closed  bool
	current *os.File // the armed eventfd
	readers sync.WaitGroup
}

func (n *eventNotifier) C() <-chan struct{} { return n.ch }

func (n *eventNotifier) Set(threshold int64) error {
	v, use, err := n.measure()
	if err != nil {
		return fmt.Errorf("memory notifier: %w", err)
	}
	// The working set is usage - inactive; it leaves threshold available at usage =
	// capacity - threshold + inactive.
	usage := max(v.Capacity-threshold+(use.usage-use.workingSet), 0)
	f, err := n.register(usage)
	if err != nil {
		return fmt.Errorf("memory notifier on %s: %w", n.dir, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		f.Close()
		return errors.New("memory notifier: closed")
	}
	if n.current != nil {
		// Closing the eventfd also removes its registration in the cgroup.
		n.current.Close()
	}
	n.current = f
	n.readers.Add(1)
	go n.read(f)
	return nil
}

// register makes an eventfd and has the kernel signal it when the cgroup's
// memory.usage_in_bytes crosses usage.
func (n *eventNotifier) register(usage int64) (*os.File, error) {
	watch, err := os.Open(filepath.Join(n.dir, "memory.usage_in_bytes"))
	if err != nil {
		return nil, err
	}
	defer watch.Close()
	control, err := os.OpenFile(filepath.Join(n.dir, "cgroup.event_control"), os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	defer control.Close()
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	// Non-blocking, so reads wait in the runtime's poller and Close ends them.
	f := os.NewFile(uintptr(efd), "memory-threshold-eventfd")
	if _, err := fmt.Fprintf(control, "%d %d %d", efd, watch.Fd(), usage); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// read forwards the eventfd's signals to ch until f is closed.
func (n *eventNotifier) read(f *os.File) {
	defer n.readers.Done()
	buf := make([]byte, 8)
	for {
		if _, err := f.Read(buf); err != nil {
			return
		}
		select {
		case n.ch <- struct{}{}:
		default:
		}
	}
}

func (n *eventNotifier) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	if n.current != nil {
		n.current.Close()
	}
	n.mu.Unlock()
	n.readers.Wait()
	close(n.ch)
	return nil
}

// sampler watches a signal by measuring it periodically.
type sampler struct {
	measure func() (Value, error)
	gap     time.Duration
	ch      chan struct{}

	mu        sync.Mutex
	threshold int64
	below     bool // the last sample was below the threshold
	armed     bool
	stop      chan struct{}
	done      chan struct{}
	closed    bool
}

func (s *Source) newSampler(measure func() (Value, error)) *sampler {
	return &sampler{measure: measure, gap: s.sampleGap, ch: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

func (m *sampler) C() <-chan struct{} { return m.ch }

// Set takes the threshold and where the signal stands now; the first Set starts the
// sampling.
func (m *sampler) Set(threshold int64) error {
	v, err := m.measure()
	if err != nil {
		return fmt.Errorf("memory notifier: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("memory notifier: closed")
	}
	m.threshold = threshold
	m.below = v.Available < threshold
	if !m.armed {
		m.armed = true
		go m.run()
	}
	return nil
}

func (m *sampler) run() {
	defer close(m.done)
	t := time.NewTicker(m.gap)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		v, err := m.measure()
		if err != nil {
			continue // a failed read is no crossing; the eviction loop reports the error
		}
		m.mu.Lock()
		below := v.Available < m.threshold
		crossed := below != m.below
		m.below = below
		m.mu.Unlock()
		if crossed {
			select {
			case m.ch <- struct{}{}:
			default:
			}
		}
	}
}

func (m *sampler) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	armed := m.armed
	m.mu.Unlock()
	close(m.stop)
	if armed {
		<-m.done
	}
	close(m.ch)
	return nil
}
