package observe

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// memTotal reads MemTotal from meminfo, in bytes: the machine's memory capacity as cadvisor
// reads it, and so the limit of the root cgroup.
func (s *Source) memTotal() (int64, error) {
	p := filepath.Join(s.procRoot, "meminfo")
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", p, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("read %s: MemTotal line %q", p, sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read %s: MemTotal: %w", p, err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("read %s: no MemTotal", p)
}

// rootMemory is memory.available: MemTotal less the root cgroup's working set.
func (s *Source) rootMemory() (Value, error) {
	v, _, err := s.rootMemoryUse()
	return v, err
}

// rootMemoryUse is rootMemory with the root cgroup's usage beside it.
func (s *Source) rootMemoryUse() (Value, memoryUse, error) {
	total, err := s.memTotal()
	if err != nil {
		return Value{}, memoryUse{}, err
	}
	use, err := s.h.readMemory(s.h.memory, true)
	if err != nil {
		return Value{}, memoryUse{}, fmt.Errorf("root cgroup: %w", err)
	}
	return Value{Available: total - use.workingSet, Capacity: total}, use, nil
}

// allocatableMemory is allocatableMemory.available; false when there is no capacity to
// give it (no limit on kubepods and no AllocatableMemory).
func (s *Source) allocatableMemory() (Value, bool) {
	v, _, err := s.allocatableMemoryUse()
	if errors.Is(err, errNoAllocatable) {
		return Value{}, false
	}
	return valueOr(v, err), true
}

// errNoAllocatable is allocatableMemory.available without a capacity.
var errNoAllocatable = errors.New("no node allocatable memory: the kubepods cgroup has no memory limit and none was given")

// allocatableMemoryUse measures the kubepods cgroup: its working set, and as capacity its
// memory limit (0 taken as the machine's memory, as cadvisor does), or Options'
// AllocatableMemory when it has none.
func (s *Source) allocatableMemoryUse() (Value, memoryUse, error) {
	var given int64
	if s.o.AllocatableMemory != nil {
		given = s.o.AllocatableMemory()
	}
	dir := filepath.Join(s.h.memory, s.kubepods)
	limit, limited, limitErr := s.h.memoryLimit(dir)
	use, useErr := s.h.readMemory(dir, false)
	if limitErr != nil || useErr != nil {
		if given <= 0 {
			return Value{}, memoryUse{}, errNoAllocatable
		}
		if useErr == nil {
			useErr = limitErr
		}
		return Value{}, memoryUse{}, fmt.Errorf("kubepods cgroup: %w", useErr)
	}
	capacity := limit
	switch {
	case limited && limit == 0:
		total, err := s.memTotal()
		if err != nil {
			return Value{}, memoryUse{}, err
		}
		capacity = total
	case !limited && given > 0:
		capacity = given
	case !limited:
		return Value{}, memoryUse{}, errNoAllocatable
	}
	return Value{Available: capacity - use.workingSet, Capacity: capacity}, use, nil
}
