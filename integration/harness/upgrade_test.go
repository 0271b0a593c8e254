package harness

import (
	"testing"
	"time"
)

// What vmInstallStepScript prints for a service's upgrade: a call to the old process, one
// that failed, one that waited out the restart in the socket's queue.
func TestParseVMInstall(t *testing.T) {
	out := `old 100
dpkg 1000.5 1010.25 0
dpkg-out Unpacking unitlet-certs (1) over (0) ...
new 200
unit InactiveEnterTimestamp=Thu 1970-01-01 00:16:45.000000 UTC
unit ActiveEnterTimestamp=Thu 1970-01-01 00:16:47.500000 UTC
call 999.0 999.5 100 v0
fail 1002.0 1002.1 rc=1 not serving
call 1004.0 1008.0 200 v1
`
	in, err := parseVMInstall("certs", out)
	if err != nil {
		t.Fatal(err)
	}
	if in.OldPID != 100 || in.NewPID != 200 || len(in.Calls) != 3 || in.DpkgOutput != "Unpacking unitlet-certs (1) over (0) ..." {
		t.Fatalf("parsed %+v", in)
	}
	if got := in.Dpkg(); got != 9750*time.Millisecond {
		t.Errorf("Dpkg() = %s, want 9.75s", got)
	}
	if got, ok := in.Downtime(); !ok || got != 2500*time.Millisecond {
		t.Errorf("Downtime() = %s %v, want 2.5s (exit 1005, ready 1007.5)", got, ok)
	}
	if got, ok := in.ToFirstAnswer(); !ok || got != 3*time.Second {
		t.Errorf("ToFirstAnswer() = %s %v, want 3s (to the end of the call answered by pid 200)", got, ok)
	}
	if f := in.Failed(); len(f) != 1 || f[0].Err != "rc=1 not serving" {
		t.Errorf("Failed() = %+v", f)
	}
	if first, _ := in.FirstAnswer(); first.Version != "v1" {
		t.Errorf("FirstAnswer() = %+v, want the call pid 200 answered", first)
	}

	if _, err := parseVMInstall("", "dpkg 1 2 1\ndpkg-out dpkg: error\n"); err == nil {
		t.Errorf("dpkg's exit 1 parsed without an error")
	}
}
