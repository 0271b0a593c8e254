package daemon

import (
	"log/slog"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryLimitRatio is the share of the service's cgroup memory limit (its unit's
// MemoryMax=) that the Go runtime's soft limit, GOMEMLIMIT, is set to: near it the runtime
// collects more often instead of letting the heap grow into the kernel's OOM kill. The
// rest is for what the runtime does not count: the binary's pages, and the slack as the
// runtime gives memory back.
const memoryLimitRatio = 0.8

// setMemoryLimit sets the runtime's soft memory limit from provider's limit (the cgroup's,
// in Main) and returns it. An explicit GOMEMLIMIT in the environment wins, as does
// AUTOMEMLIMIT (a ratio, or "off"); without a limit (no cgroup limit, as under the
// harness's process backend) the runtime's default stays: no soft limit. Errors are logged,
// never fatal: a service without a soft limit still runs.
func setMemoryLimit(log *slog.Logger, provider memlimit.Provider) int64 {
	limit, _ := memlimit.Set(
		memlimit.WithProvider(provider),
		memlimit.WithRatio(memoryLimitRatio),
		memlimit.WithLogger(log.With("component", "memlimit")),
	)
	return limit
}
