package nodeinfo

import (
	"syscall"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestReadMachineOnThisHost(t *testing.T) {
	dir := t.TempDir()
	m, err := ReadMachine(dir)
	if err != nil {
		t.Fatalf("ReadMachine: %v", err)
	}
	if m.CPUMilli < 1000 || m.CPUMilli%1000 != 0 {
		t.Errorf("CPUMilli = %d, want a positive whole number of CPUs", m.CPUMilli)
	}
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	if total := int64(si.Totalram) * int64(si.Unit); m.MemoryBytes != total {
		// MemTotal and sysinfo's totalram are the same kernel counter.
		t.Errorf("MemoryBytes = %d, sysinfo says %d", m.MemoryBytes, total)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if want := int64(st.Blocks) * int64(st.Bsize); m.EphemeralStorageBytes <= 0 || m.EphemeralStorageBytes != want {
		t.Errorf("EphemeralStorageBytes = %d, want the size of %s's filesystem, %d", m.EphemeralStorageBytes, dir, want)
	}
	for size, bytes := range m.HugePages {
		q, err := resource.ParseQuantity(size)
		if err != nil || q.Value() <= 0 {
			t.Errorf("huge page size %q is not a positive quantity", size)
		}
		if bytes < 0 || (q.Value() > 0 && bytes%q.Value() != 0) {
			t.Errorf("huge pages %s = %d bytes, not a whole number of pages", size, bytes)
		}
	}
}
