package harness

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadStackKubeadm(t *testing.T) {
	s, err := LoadStack(filepath.Join("..", "stacks", "kubeadm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Nodes) != 1 || !s.Nodes[0].Kubeadm || s.Nodes[0].Backend != "nspawn" {
		t.Errorf("kubeadm.yaml nodes %+v, want one nspawn node with kubeadm", s.Nodes)
	}
	dir := t.TempDir()
	const cp = "runtime: {kind: containerd}\n"
	const all = "services: [config, certs, podsync, status, volumes, eviction]"
	for body, want := range map[string]string{
		cp + "nodes: [{name: k1, backend: nspawn, kubeadm: true, " + all + "}]\n":                   "",
		cp + "nodes: [{name: k1, backend: process, kubeadm: true, " + all + "}]\n":                  `backend "process": only an nspawn node`,
		"nodes: [{name: k1, backend: nspawn, kubeadm: true, " + all + "}]\n":                        "the stack needs both",
		cp + "standalone: true\nnodes: [{name: k1, backend: nspawn, kubeadm: true, " + all + "}]\n": "the stack needs both",
		cp + "nodes: [{name: k1, backend: nspawn, kubeadm: true, services: [config, podsync]}]\n":   "brings every service",
		cp + "nodes: [{name: k1, backend: nspawn, kubeadm: true, bootstrap: true, " + all + "}]\n":  "kubeadm writes the node's configuration",
		cp + "nodes: [{name: k1, backend: nspawn, kubeadm: true, maxPods: 5, " + all + "}]\n":       "kubeadm writes the node's configuration",
	} {
		checkLoadStack(t, dir, body, want)
	}
}

// The harness's drop-ins of a kubeadm node leave unitlet-config's root dir and credentials
// to kubeadm's files (and /etc/default/kubelet); another nspawn node's keep them.
func TestKubeadmNodeDropIns(t *testing.T) {
	h := &Harness{stack: &Stack{Name: "s", Runtime: Runtime{Kind: "containerd"}}, paths: newPaths(t.TempDir())}
	kubeadm := Node{Name: "k", Backend: "nspawn", Kubeadm: true}
	other := Node{Name: "k", Backend: "nspawn"}
	for _, v := range []string{"UNITLET_ROOT_DIR=", "UNITLET_KUBECONFIG="} {
		if d := h.unitDropIn(kubeadm, "config"); strings.Contains(d, v) {
			t.Errorf("kubeadm node's unitlet-config drop-in sets %s:\n%s", v, d)
		}
		if d := h.unitDropIn(other, "config"); !strings.Contains(d, v) {
			t.Errorf("nspawn node's unitlet-config drop-in lacks %s:\n%s", v, d)
		}
	}
	for _, svc := range knownServices {
		if svc != "config" && h.unitDropIn(kubeadm, svc) != h.unitDropIn(other, svc) {
			t.Errorf("unitlet-%s's drop-in differs between a kubeadm node and another:\n%s\n--\n%s", svc, h.unitDropIn(kubeadm, svc), h.unitDropIn(other, svc))
		}
	}
}
