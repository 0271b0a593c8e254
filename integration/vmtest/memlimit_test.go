package vmtest

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/unitlet/unitlet/shared/promtext"
)

// TestGoMemoryLimitFollowsEachUnitsMemoryMax: under its shipped unit each service's Go
// runtime has a soft memory limit (go_gc_gomemlimit_bytes, read from the service's own
// metrics socket in the guest, which the stack opts in to) of 80% of its cgroup's
// memory.max, and GOGC 50; a unit without MemoryMax= leaves the runtime's default (no
// soft limit).
func TestGoMemoryLimitFollowsEachUnitsMemoryMax(t *testing.T) {
	n := vmNode(t)
	for _, svc := range n.Services {
		unit := "unitlet-" + svc + ".service"
		// The harness's drop-in's socket, beside the unit's loopback port.
		addr := ""
		for _, kv := range strings.Fields(stack.UnitProps(t, n.Name, unit, "Environment")["Environment"]) {
			if v, ok := strings.CutPrefix(kv, "UNITLET_METRICS_SOCKET="); ok {
				addr = v
			}
		}
		if addr == "" {
			t.Fatalf("%s: no UNITLET_METRICS_SOCKET, want the stack's socket (a TCP port serves /healthz alone)", unit)
		}
		// The guest has perl and no HTTP client: a plain GET over the socket.
		body := stack.InNode(t, n.Name, "perl", "-MIO::Socket::UNIX", "-e",
			`my $s = IO::Socket::UNIX->new(Peer => $ARGV[0]) or die "connect $ARGV[0]: $!"; print $s "GET /metrics HTTP/1.0\r\n\r\n"; my $in = 0; while (<$s>) { $in = 1 if /^\r?$/; print if $in }`, addr)
		families, err := promtext.Parse(body + "\n")
		if err != nil {
			t.Fatalf("%s's metrics at %s: %v", unit, addr, err)
		}
		max := cgroupFile(t, n.Name, unit, "memory.max")
		want := float64(math.MaxInt64)
		if max != "max" {
			b, err := strconv.ParseInt(max, 10, 64)
			if err != nil {
				t.Fatalf("%s: memory.max %q", unit, max)
			}
			want = math.Floor(0.8 * float64(b))
		}
		limit := promtext.Find(families, "go_gc_gomemlimit_bytes", nil)
		if limit == nil {
			t.Fatalf("%s: no go_gc_gomemlimit_bytes at %s", unit, addr)
		}
		// automemlimit takes 80% of the limit in whole bytes; allow a byte.
		if got := promtext.Value(limit); math.Abs(got-want) > 1 {
			t.Errorf("%s: GOMEMLIMIT %.0f, want %.0f (80%% of memory.max %s)", unit, got, want, max)
		} else {
			t.Logf("%s: memory.max %s, GOMEMLIMIT %.0f", unit, max, got)
		}
		if gogc := promtext.Find(families, "go_gc_gogc_percent", nil); gogc == nil || promtext.Value(gogc) != 50 {
			t.Errorf("%s: go_gc_gogc_percent %v, want 50", unit, gogc)
		}
	}
}
