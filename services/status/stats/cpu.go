package stats

import "time"

// minRateInterval is the shortest interval a CPU rate is computed over; a sample closer to
// the last kept one repeats the last rate, so that two scrapes a moment apart do not give a
// rate over a few microseconds.
const minRateInterval = time.Second

// cpuSample is one cumulative CPU usage reading and the rate computed when it was taken.
type cpuSample struct {
	at    time.Time
	usage uint64 // core-nanoseconds
	rate  *uint64
	seen  bool // seen in the current listing of pods, for sweeping
}

// usageNanoCores turns the cumulative usage of key at time at into cores used since the last
// sample (in billionths of a core). The first sample of a key, and one after the counter went
// back (a new cgroup under the same key), gives nil.
func (p *Provider) usageNanoCores(key string, at time.Time, usage uint64) *uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev, ok := p.cpu[key]
	if !ok || usage < prev.usage || !at.After(prev.at) {
		p.cpu[key] = cpuSample{at: at, usage: usage, seen: true}
		return nil
	}
	if at.Sub(prev.at) < minRateInterval {
		prev.seen = true
		p.cpu[key] = prev
		return copyPtr(prev.rate)
	}
	rate := uint64(float64(usage-prev.usage) / float64(at.Sub(prev.at).Nanoseconds()) * float64(time.Second))
	p.cpu[key] = cpuSample{at: at, usage: usage, rate: &rate, seen: true}
	return copyPtr(&rate)
}

// sweepCPU forgets the samples of pods and containers not seen since the last sweep.
func (p *Provider) sweepCPU() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, s := range p.cpu {
		if k == nodeCPUKey {
			continue
		}
		if !s.seen {
			delete(p.cpu, k)
			continue
		}
		s.seen = false
		p.cpu[k] = s
	}
}

func copyPtr[T any](v *T) *T {
	if v == nil {
		return nil
	}
	c := *v
	return &c
}
