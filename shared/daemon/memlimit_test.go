package daemon

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// keepMemoryLimit puts the runtime's soft limit back as it was when the test ends.
func keepMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
}

// unsetEnv removes the variables for the test (t.Setenv puts them back after).
func unsetEnv(t *testing.T, names ...string) {
	for _, n := range names {
		t.Setenv(n, "")
		os.Unsetenv(n)
	}
}

func TestSetMemoryLimitIsAShareOfTheCgroupLimit(t *testing.T) {
	keepMemoryLimit(t)
	unsetEnv(t, "AUTOMEMLIMIT", "GOMEMLIMIT")
	var unitMax uint64 = 128 << 20 // MemoryMax=128M
	got := setMemoryLimit(slog.New(slog.DiscardHandler), memlimit.Limit(unitMax))
	want := int64(float64(unitMax) * memoryLimitRatio) // 102.4 MiB
	if got != want || debug.SetMemoryLimit(-1) != want {
		t.Fatalf("soft limit %d (runtime %d), want %d: %.0f%% of the cgroup's", got, debug.SetMemoryLimit(-1), want, 100*memoryLimitRatio)
	}
}

func TestSetMemoryLimitWithoutCgroupLimitLeavesNone(t *testing.T) {
	keepMemoryLimit(t)
	unsetEnv(t, "AUTOMEMLIMIT", "GOMEMLIMIT")
	noLimit := func() (uint64, error) { return 0, memlimit.ErrNoLimit }
	if got := setMemoryLimit(slog.New(slog.DiscardHandler), noLimit); got != math.MaxInt64 {
		t.Fatalf("soft limit %d without a cgroup limit, want none (%d)", got, int64(math.MaxInt64))
	}
}

func TestSetMemoryLimitLeavesAnExplicitGOMEMLIMIT(t *testing.T) {
	keepMemoryLimit(t)
	unsetEnv(t, "AUTOMEMLIMIT")
	t.Setenv("GOMEMLIMIT", "50MiB")
	debug.SetMemoryLimit(50 << 20) // as the runtime read it at start
	if got := setMemoryLimit(slog.New(slog.DiscardHandler), memlimit.Limit(128<<20)); got != 50<<20 {
		t.Fatalf("soft limit %d with GOMEMLIMIT=50MiB, want the variable's %d", got, 50<<20)
	}
}

func TestSetGCPercentUnlessGOGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	unsetEnv(t, "GOGC")
	setGCPercent()
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("GOGC %d without the variable, want %d", got, gcPercent)
	}
	t.Setenv("GOGC", "100")
	setGCPercent()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC %d with GOGC=100 set, want the variable's", got)
	}
}
