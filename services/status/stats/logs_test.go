package stats

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestSummaryLogsAndEphemeralStorage(t *testing.T) {
	h := newHost(t, false)
	rt := cluster()
	rt.imageFs = imageFs(h.root)
	logs := filepath.Join(h.root, "logs", "default_web_uid-web")
	h.write(t, logs, "app/0.log", strings.Repeat("x", 64<<10))
	h.write(t, logs, "sidecar/0.log", "hello\n")
	h.write(t, h.root, "pods/uid-web/etc-hosts", "127.0.0.1 localhost\n")
	p := newProvider(h, rt, clocktesting.NewFakeClock(t0))

	s, err := p.Summary(context.Background(), false)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	ps := s.Pods[0]
	app, side := ps.Containers[0], ps.Containers[1]
	if app.Logs == nil || side.Logs == nil {
		t.Fatalf("containers' logs = %+v, %+v: want both measured", app.Logs, side.Logs)
	}
	if *app.Logs.UsedBytes < 64<<10 || *app.Logs.InodesUsed != 2 {
		t.Errorf("app logs = %d bytes, %d inodes: want at least 64 KiB in 2 inodes (directory and file)", *app.Logs.UsedBytes, *app.Logs.InodesUsed)
	}
	if app.Logs.CapacityBytes == nil || *app.Logs.CapacityBytes != *s.Node.Fs.CapacityBytes {
		t.Errorf("app logs capacity = %v, want the node filesystem's", app.Logs.CapacityBytes)
	}
	// Writable layers 4096 + 1024 bytes, both log directories, the hosts file.
	wantUsed := 4096 + 1024 + *app.Logs.UsedBytes + *side.Logs.UsedBytes
	if got := *ps.EphemeralStorage.UsedBytes; got <= wantUsed {
		t.Errorf("ephemeral storage = %d bytes, want more than layers and logs (%d): the hosts file too", got, wantUsed)
	}
	if got, want := *ps.EphemeralStorage.InodesUsed, 3+3+*app.Logs.InodesUsed+*side.Logs.InodesUsed+1; got != want {
		t.Errorf("ephemeral storage inodes = %d, want %d (layers, logs and the hosts file)", got, want)
	}

	only, err := p.Summary(context.Background(), true)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	if only.Pods[0].Containers[0].Logs != nil || only.Node.Network != nil {
		t.Errorf("only_cpu_and_memory kept logs or network")
	}
}

func TestSummaryNodeNetwork(t *testing.T) {
	h := newHost(t, true)
	rt := cluster()
	rt.imageFs = imageFs(h.root)
	s, err := newProvider(h, rt, clocktesting.NewFakeClock(t0)).Summary(context.Background(), false)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	n := s.Node.Network
	if n == nil {
		t.Fatal("no node network")
	}
	var names []string
	for _, i := range n.Interfaces {
		names = append(names, i.Name)
	}
	if got := strings.Join(names, ","); got != "ens4,eth0" {
		t.Errorf("interfaces = %s, want ens4,eth0 (lo and veth left out)", got)
	}
	if n.Name != "eth0" {
		t.Fatalf("default interface = %q, want eth0", n.Name)
	}
	u64(t, "eth0 rx bytes", n.RxBytes, 500000)
	u64(t, "eth0 rx errors", n.RxErrors, 3)
	u64(t, "eth0 tx bytes", n.TxBytes, 200000)
	u64(t, "eth0 tx errors", n.TxErrors, 1)
}
