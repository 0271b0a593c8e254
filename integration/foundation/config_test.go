package foundation

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
)

// TestBadConfigAtStartExits2 runs unitlet-config on bad input: each case must exit 2 with
// one line on stderr naming the file (or flag) and the field.
func TestBadConfigAtStartExits2(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, n *node) []string // returns extra flags
		want  []string                             // substrings of the error line
	}{
		{"unknown field", func(t *testing.T, n *node) []string {
			n.write(t, n.config, goodConfig+"maxPodz: 3\n")
			return nil
		}, []string{"config.yaml", "maxPodz"}},
		{"wrong type", func(t *testing.T, n *node) []string {
			n.write(t, n.config, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: many\n")
			return nil
		}, []string{"config.yaml", "maxPods"}},
		{"invalid duration", func(t *testing.T, n *node) []string {
			n.write(t, n.config, goodConfig+"syncFrequency: 5 parsecs\n")
			return nil
		}, []string{"config.yaml", "syncFrequency"}},
		{"invalid node name", func(t *testing.T, n *node) []string {
			return []string{"--hostname-override=Not_A_Valid.Name!"}
		}, []string{"--hostname-override", "DNS-1123"}},
		{"unreadable file", func(t *testing.T, n *node) []string {
			// Root reads any file; a directory in place of the file is unreadable to all.
			if err := os.Remove(n.config); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(n.config, 0o755); err != nil {
				t.Fatal(err)
			}
			return nil
		}, []string{"config.yaml", "directory"}},
		{"missing file", func(t *testing.T, n *node) []string {
			if err := os.Remove(n.config); err != nil {
				t.Fatal(err)
			}
			return nil
		}, []string{"config.yaml", "no such file"}},
		{"drop-in breaks validation", func(t *testing.T, n *node) []string {
			n.write(t, filepath.Join(n.configDir, "90-bad.conf"),
				"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageGCHighThresholdPercent: 150\n")
			return nil
		}, []string{"90-bad.conf", "imageGCHighThresholdPercent"}},
		{"a field unitlet does not support", func(t *testing.T, n *node) []string {
			n.write(t, filepath.Join(n.configDir, "50-cpu.conf"),
				"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\n")
			return nil
		}, []string{"50-cpu.conf", "cpuManagerPolicy", "not supported", "no CPU manager"}},
		{"a feature gate unitlet does not know", func(t *testing.T, n *node) []string {
			n.write(t, n.config, goodConfig+"featureGates: {NoSuchGate: true}\n")
			return nil
		}, []string{"config.yaml", "featureGates[NoSuchGate]"}},
		{"bad flag value", func(t *testing.T, n *node) []string {
			return []string{"--node-ip=not-an-ip"}
		}, []string{"--node-ip", "not-an-ip"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			extra := c.setup(t, n)
			p := start(t, binary(t, "unitlet-config"), n.args(extra...), n.env())
			if code := p.exitCode(t, 20*time.Second); code != 2 {
				t.Fatalf("exit code %d, want 2; output:\n%s", code, p.log())
			}
			out := strings.TrimSpace(p.log())
			if strings.Count(out, "\n") != 0 {
				t.Errorf("want one line on stderr, got:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("stderr %q does not name %q", out, w)
				}
			}
		})
	}
}

// TestReloadKeepsLastKnownGood breaks the configuration of a running unitlet-config in each
// way the start test checks, by file change and by SIGHUP: the configuration in effect keeps
// serving, and the failure shows in the API and the metrics. Fixing it makes a new
// generation that watchers receive.
func TestReloadKeepsLastKnownGood(t *testing.T) {
	n := newNode(t)
	metrics := filepath.Join(n.socketDir, "config-metrics.sock")
	p := start(t, binary(t, "unitlet-config"), n.args(), append(n.env(), "UNITLET_METRICS_SOCKET="+metrics))
	waitSocket(t, p, n.socket())
	conn := dial(t, n.socket())
	good := getConfig(t, conn)
	client := configv1.NewConfigServiceClient(conn)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch, err := client.WatchConfig(ctx, &configv1.WatchConfigRequest{AfterGeneration: good.GetGeneration()})
	if err != nil {
		t.Fatal(err)
	}
	updates := make(chan *configv1.NodeConfig, 8)
	go func() {
		for {
			m, err := watch.Recv()
			if err != nil {
				close(updates)
				return
			}
			updates <- m.GetConfig()
		}
	}()

	bad := []struct {
		name, file, content, field string
	}{
		{"unknown field", n.config, goodConfig + "maxPodz: 3\n", "maxPodz"},
		{"wrong type", n.config, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: many\n", "maxPods"},
		{"invalid duration", n.config, goodConfig + "syncFrequency: 5 parsecs\n", "syncFrequency"},
		{"drop-in breaks validation", filepath.Join(n.configDir, "90-bad.conf"),
			"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageGCHighThresholdPercent: 150\n", "imageGCHighThresholdPercent"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			if b.file != n.config {
				n.write(t, n.config, goodConfig)
			}
			n.write(t, b.file, b.content)
			defer func() {
				if b.file != n.config {
					os.Remove(b.file)
				}
			}()
			for _, trigger := range []string{"file-change", "signal"} {
				if trigger == "signal" {
					if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
						t.Fatal(err)
					}
				}
				waitFor(t, 10*time.Second, "reload failure by "+trigger, func() (bool, string) {
					st := reloadStatus(t, conn)
					return !st.GetLastReloadSuccessful() && st.GetTrigger() == trigger, st.String()
				})
				st := reloadStatus(t, conn)
				if st.GetLastErrorField() != b.field || st.GetLastErrorFile() != b.file || !strings.Contains(st.GetLastError(), b.field) {
					t.Errorf("reload status names file %q field %q (%q), want %q %q", st.GetLastErrorFile(), st.GetLastErrorField(), st.GetLastError(), b.file, b.field)
				}
				// unitletctl status says it is degraded.
				out, _ := exec.Command(binary(t, "unitletctl"), "--socket-dir="+n.socketDir, "status", "config").CombinedOutput()
				if !strings.Contains(string(out), "degraded") || !strings.Contains(string(out), b.field) {
					t.Errorf("unitletctl status config:\n%s\nwant it degraded, with the error", out)
				}
				now := getConfig(t, conn)
				if now.GetGeneration() != good.GetGeneration() || now.GetHash() != good.GetHash() {
					t.Errorf("after a bad reload the config changed: generation %d -> %d", good.GetGeneration(), now.GetGeneration())
				}
				_, page := unixGet(t, metrics, "/metrics")
				if v, _ := metric(page, "unitlet_config_last_reload_successful"); v != "0" {
					t.Errorf("unitlet_config_last_reload_successful = %q after a failed reload, want 0", v)
				}
			}
			if !strings.Contains(p.log(), b.field) {
				t.Errorf("the log does not mention %s", b.field)
			}
		})
	}

	// Fix it with a real change: a new generation, received by the watcher.
	n.write(t, n.config, strings.Replace(goodConfig, "maxPods: 42", "maxPods: 43", 1))
	select {
	case c, ok := <-updates:
		if !ok {
			t.Fatal("watch ended")
		}
		if c.GetGeneration() != good.GetGeneration()+1 || !strings.Contains(string(c.GetKubeletConfiguration()), `"maxPods":43`) {
			t.Fatalf("watch got generation %d, want %d with maxPods 43", c.GetGeneration(), good.GetGeneration()+1)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the fixed configuration did not reach the watcher; status %v", reloadStatus(t, conn))
	}
	st := reloadStatus(t, conn)
	if !st.GetLastReloadSuccessful() || st.GetLastError() != "" {
		t.Fatalf("after the fix: %v", st)
	}
	_, page := unixGet(t, metrics, "/metrics")
	if v, _ := metric(page, "unitlet_config_last_reload_successful"); v != "1" {
		t.Errorf("unitlet_config_last_reload_successful = %q after the fix, want 1", v)
	}
}

// TestCgroupV1IsRefusedUnlessAllowed: with failCgroupV1 at the kubelet's default (true),
// unitlet-config refuses a cgroup v1 host as the kubelet does; these machines are v1.
func TestCgroupV1IsRefusedUnlessAllowed(t *testing.T) {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/sys/fs/cgroup", &st); err != nil {
		t.Fatal(err)
	}
	const cgroup2Magic = 0x63677270
	n := newNode(t)
	n.write(t, n.config, strings.Replace(goodConfig, "failCgroupV1: false\n", "", 1))
	p := start(t, binary(t, "unitlet-config"), n.args(), n.env())
	if st.Type == cgroup2Magic {
		// A cgroup v2 host: the default loads.
		waitSocket(t, p, n.socket())
		return
	}
	if code := p.exitCode(t, 20*time.Second); code != 2 {
		t.Fatalf("exit code %d on a cgroup v1 host, want 2; output:\n%s", code, p.log())
	}
	if out := p.log(); !strings.Contains(out, "failCgroupV1: this host uses cgroup v1") || !strings.Contains(out, "set failCgroupV1: false") {
		t.Errorf("stderr %q: want the refusal naming failCgroupV1 and the fix", out)
	}
}

// TestGenerationSurvivesRestart: the same inputs give the same generation after a restart;
// a change gives the next one.
func TestGenerationSurvivesRestart(t *testing.T) {
	n := newNode(t)
	gen := func() uint64 {
		p := start(t, binary(t, "unitlet-config"), n.args(), n.env())
		waitSocket(t, p, n.socket())
		g := getConfig(t, dial(t, n.socket())).GetGeneration()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.exitCode(t, 20*time.Second); code != 0 {
			t.Fatalf("exit %d", code)
		}
		return g
	}
	first := gen()
	if again := gen(); again != first {
		t.Fatalf("same inputs after a restart: generation %d, want %d", again, first)
	}
	n.write(t, n.config, goodConfig+"podsPerCore: 50\n")
	if next := gen(); next != first+1 {
		t.Fatalf("changed inputs after a restart: generation %d, want %d", next, first+1)
	}
}

// TestSecondInstanceExits1 checks the single-instance lock.
func TestSecondInstanceExits1(t *testing.T) {
	n := newNode(t)
	first := start(t, binary(t, "unitlet-config"), n.args(), n.env())
	waitSocket(t, first, n.socket())
	other := filepath.Join(n.dir, "sock2")
	second := start(t, binary(t, "unitlet-config"), n.args(), []string{"UNITLET_SOCKET_DIR=" + other})
	if code := second.exitCode(t, 20*time.Second); code != 1 {
		t.Fatalf("second instance exit %d, want 1:\n%s", code, second.log())
	}
	msg := second.log()
	if !strings.Contains(msg, "another unitlet-config is running") || !strings.Contains(msg, "pid ") {
		t.Fatalf("second instance message: %q", msg)
	}
	// The first one is unaffected.
	getConfig(t, dial(t, n.socket()))
}

// TestRestartWithBrokenFileStops: unitlet-config restarted with a file that no longer
// loads exits 2 naming the file and the field, although a configuration loaded from that
// file before: as the kubelet, it does not start on a configuration it cannot load.
func TestRestartWithBrokenFileStops(t *testing.T) {
	n := newNode(t)
	first := start(t, binary(t, "unitlet-config"), n.args(), n.env())
	waitSocket(t, first, n.socket())
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := first.exitCode(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	n.write(t, n.config, goodConfig+"syncFrequency: 5 parsecs\n")
	p := start(t, binary(t, "unitlet-config"), n.args(), n.env())
	if code := p.exitCode(t, 20*time.Second); code != 2 {
		t.Fatalf("restart with a broken file: exit %d, want 2; output:\n%s", code, p.log())
	}
	if out := p.log(); !strings.Contains(out, "config.yaml") || !strings.Contains(out, "syncFrequency") {
		t.Errorf("stderr %q does not name config.yaml and syncFrequency", out)
	}
}

// TestMissingKubeconfigIsNotStandalone: a --kubeconfig that is set but missing, with no
// bootstrap kubeconfig to write it, is an error (exit 1: systemd tries again, the file may
// yet come), never a quieter standalone node.
func TestMissingKubeconfigIsNotStandalone(t *testing.T) {
	n := newNode(t)
	missing := filepath.Join(n.dir, "kubeconfig")
	p := start(t, binary(t, "unitlet-config"), n.args("--kubeconfig="+missing), n.env())
	if code := p.exitCode(t, 20*time.Second); code != 1 {
		t.Fatalf("exit %d, want 1; output:\n%s", code, p.log())
	}
	if out := p.log(); !strings.Contains(out, "--kubeconfig "+missing) || !strings.Contains(out, "--bootstrap-kubeconfig") {
		t.Errorf("the error does not name the file and what to do:\n%s", out)
	}
	// With a bootstrap kubeconfig, the missing file is TLS bootstrap's to write: it starts.
	boot := filepath.Join(n.dir, "bootstrap.kubeconfig")
	n.write(t, boot, "apiVersion: v1\nkind: Config\n")
	q := start(t, binary(t, "unitlet-config"), n.args("--kubeconfig="+missing, "--bootstrap-kubeconfig="+boot), n.env())
	waitSocket(t, q, n.socket())
}
