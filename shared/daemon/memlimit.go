package daemon

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"

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
		memlimit.WithLogger(slog.New(infoAndAbove{log.With("component", "memlimit").Handler()})),
	)
	return limit
}

// infoAndAbove passes on a handler's records from Info up: the library's Debug line at
// every start ("GOMEMLIMIT is unchanged", a process without a cgroup limit) says nothing a
// user needs, and a service that fails at start prints its one error line alone.
type infoAndAbove struct{ slog.Handler }

func (h infoAndAbove) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo && h.Handler.Enabled(ctx, l)
}

func (h infoAndAbove) WithAttrs(attrs []slog.Attr) slog.Handler {
	return infoAndAbove{h.Handler.WithAttrs(attrs)}
}

func (h infoAndAbove) WithGroup(name string) slog.Handler {
	return infoAndAbove{h.Handler.WithGroup(name)}
}

// gcPercent is the services' GOGC: the heap grows by half its live size between
// collections instead of the runtime's default 100%. The services' heaps are small (5 to
// 30 MiB) and, but for podsync and status while pods start, allocate little, so the extra
// collections cost little CPU, while each service's heap and the free heap it holds shrink.
const gcPercent = 50

// setGCPercent sets gcPercent unless the environment has GOGC, which wins.
func setGCPercent() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(gcPercent)
	}
}
