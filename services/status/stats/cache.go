package stats

import (
	"context"
	"sync"
	"time"

	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// DefaultCollectPeriod is how often a Cache collects a summary: the kubelet's cadvisor
// housekeeping interval (10 s), at which the kubelet's own summary figures change.
const DefaultCollectPeriod = 10 * time.Second

// staleAfter is how many periods a summary is served after the collections that followed
// it failed; after that a request gets the collection's error.
const staleAfter = 3

// Cache serves summaries from the last one collected in the background, as the kubelet
// serves its summary from cadvisor's housekeeping, so that a request never waits on the
// runtime's stats of every container. It holds one summary, whatever pods came and went.
type Cache struct {
	p      *Provider
	period time.Duration

	collecting sync.Mutex // one collection at a time

	mu      sync.Mutex
	last    *statsv1alpha1.Summary
	lastAt  time.Time
	lastErr error
	// asked is when a summary was last asked for: the background collection runs only
	// while someone reads the summaries (idleAfter), so that a node nobody scrapes does not
	// pay for the runtime's stats of every container every period.
	asked time.Time
}

// idleAfter is how many periods without a request stop the background collection.
const idleAfter = 6

// NewCache returns a Cache collecting from p every period (DefaultCollectPeriod when 0).
func NewCache(p *Provider, period time.Duration) *Cache {
	if period <= 0 {
		period = DefaultCollectPeriod
	}
	return &Cache{p: p, period: period}
}

// Run collects a summary now and then every period (from the start of one collection to
// the next, so that two reads a period apart see two summaries), until ctx ends.
func (c *Cache) Run(ctx context.Context) error {
	for {
		start := c.p.clock.Now()
		c.mu.Lock()
		wanted := !c.asked.IsZero() && c.p.clock.Since(c.asked) <= idleAfter*c.period
		c.mu.Unlock()
		if wanted {
			c.collect(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.p.clock.After(max(c.period-c.p.clock.Since(start), 0)):
		}
	}
}

// Summary returns the last summary collected; before the first collection, or after an
// idle spell, it collects one itself. With onlyCPUAndMemory it leaves out what Provider.Summary leaves out then.
func (c *Cache) Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsv1alpha1.Summary, error) {
	c.mu.Lock()
	c.asked = c.p.clock.Now()
	// After an idle spell the last summary is old: collect afresh, as before the first.
	idle := c.last != nil && c.p.clock.Since(c.lastAt) > 2*c.period
	c.mu.Unlock()
	if idle {
		c.collect(ctx)
	}
	s, err := c.latest()
	if s == nil && err == nil {
		c.collect(ctx)
		s, err = c.latest()
	}
	if err != nil {
		return nil, err
	}
	if onlyCPUAndMemory {
		return cpuAndMemoryOnly(s), nil
	}
	return s, nil
}

// latest is the last summary, or the last collection's error when the summary is older
// than staleAfter periods.
func (c *Cache) latest() (*statsv1alpha1.Summary, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastErr != nil && (c.last == nil || c.p.clock.Since(c.lastAt) > staleAfter*c.period) {
		return nil, c.lastErr
	}
	return c.last, nil
}

func (c *Cache) collect(ctx context.Context) {
	c.collecting.Lock()
	defer c.collecting.Unlock()
	s, err := c.p.Summary(ctx, false)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err
	if err == nil {
		c.last, c.lastAt = s, c.p.clock.Now()
	}
}

// cpuAndMemoryOnly is a copy of s without what ?only_cpu_and_memory=true leaves out; s is
// shared by concurrent requests and is not changed.
func cpuAndMemoryOnly(s *statsv1alpha1.Summary) *statsv1alpha1.Summary {
	node := statsv1alpha1.NodeStats{
		NodeName:         s.Node.NodeName,
		StartTime:        s.Node.StartTime,
		CPU:              s.Node.CPU,
		Memory:           s.Node.Memory,
		SystemContainers: cpuAndMemoryContainers(s.Node.SystemContainers),
	}
	pods := make([]statsv1alpha1.PodStats, len(s.Pods))
	for i, p := range s.Pods {
		pods[i] = statsv1alpha1.PodStats{
			PodRef:     p.PodRef,
			StartTime:  p.StartTime,
			CPU:        p.CPU,
			Memory:     p.Memory,
			Containers: cpuAndMemoryContainers(p.Containers),
		}
	}
	return &statsv1alpha1.Summary{Node: node, Pods: pods}
}

func cpuAndMemoryContainers(cs []statsv1alpha1.ContainerStats) []statsv1alpha1.ContainerStats {
	if cs == nil {
		return nil
	}
	out := make([]statsv1alpha1.ContainerStats, len(cs))
	for i, c := range cs {
		out[i] = statsv1alpha1.ContainerStats{Name: c.Name, StartTime: c.StartTime, CPU: c.CPU, Memory: c.Memory}
	}
	return out
}
