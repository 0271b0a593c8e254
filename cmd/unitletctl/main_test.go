package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/envconfig"
)

type fakeConfig struct {
	configv1.UnimplementedConfigServiceServer
	status *configv1.ReloadStatus
	// boot is the TLS bootstrap's status; nil answers Unimplemented, as an older
	// unitlet-config does.
	boot *configv1.BootstrapStatus
	// schema is the configuration's kubelet_configuration_schema; empty as from a
	// unitlet-config that predates it.
	schema string
	// bootDelay is how long GetBootstrapStatus takes to answer.
	bootDelay time.Duration
}

func (f fakeConfig) GetBootstrapStatus(ctx context.Context, r *configv1.GetBootstrapStatusRequest) (*configv1.GetBootstrapStatusResponse, error) {
	select {
	case <-time.After(f.bootDelay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if f.boot == nil {
		return f.UnimplementedConfigServiceServer.GetBootstrapStatus(ctx, r)
	}
	return &configv1.GetBootstrapStatusResponse{Status: f.boot}, nil
}

func (f fakeConfig) GetConfig(context.Context, *configv1.GetConfigRequest) (*configv1.GetConfigResponse, error) {
	return &configv1.GetConfigResponse{Config: &configv1.NodeConfig{
		Generation:                 7,
		KubeletConfiguration:       []byte(`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","maxPods":42,"staticPodURLHeader":{"Authorization":["Bearer s3cr3t"]}}`),
		KubeletConfigurationSchema: f.schema,
		Sources:                    []*configv1.Source{{Kind: configv1.SourceKind_SOURCE_KIND_DEFAULTS}, {Kind: configv1.SourceKind_SOURCE_KIND_FILE, Name: "/etc/unitlet/config.yaml", Sha256: "0123456789abcdef0123"}},
		Node:                       &configv1.NodeIdentity{Name: "node-a", Ips: []string{"192.0.2.1"}, Labels: map[string]string{"kubernetes.io/os": "linux"}},
		Paths:                      &configv1.Paths{RootDir: "/var/lib/unitlet", CertDir: "/var/lib/unitlet/pki"},
		LoadTime:                   timestamppb.Now(),
	}}, nil
}

func (f fakeConfig) GetReloadStatus(context.Context, *configv1.GetReloadStatusRequest) (*configv1.GetReloadStatusResponse, error) {
	return &configv1.GetReloadStatusResponse{Status: f.status}, nil
}

// serveConfig runs a real daemon with a fake config API in a temp socket dir.
func serveConfig(t *testing.T, st *configv1.ReloadStatus) string {
	return serveFakeConfig(t, fakeConfig{status: st})
}

// serveFakeConfig runs a real daemon serving f in a temp socket dir.
func serveFakeConfig(t *testing.T, f fakeConfig) string {
	t.Helper()
	dir := t.TempDir()
	serveDaemon(t, dir, "config", func(d *daemon.Daemon) { configv1.RegisterConfigServiceServer(d.Server(), f) })
	return dir
}

// serveDaemon runs a real daemon for service in dir, with what register adds to it.
func serveDaemon(t *testing.T, dir, service string, register func(*daemon.Daemon)) {
	t.Helper()
	var s daemon.Settings
	if err := envconfig.Parse(&s, map[string]string{"UNITLET_SOCKET_DIR": dir}); err != nil {
		t.Fatal(err)
	}
	d := daemon.New(daemon.Options{Service: service, Settings: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	register(d)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(dir, service+".sock")); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the fake %s service did not start", service)
}

func ctl(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"--timeout=2s"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func TestStatus(t *testing.T) {
	dir := serveConfig(t, &configv1.ReloadStatus{LastReloadSuccessful: true})
	out, _, code := ctl("--socket-dir="+dir, "status", "config")
	if code != 0 || !strings.Contains(out, "unitlet-config") || !strings.Contains(out, "SERVING") || !strings.Contains(out, "present") {
		t.Fatalf("status config: exit %d\n%s", code, out)
	}
	out, errOut, code := ctl("--socket-dir="+dir, "status")
	if code != 1 || !strings.Contains(errOut, "not serving: unitlet-certs") {
		t.Fatalf("status with services down: exit %d stderr %q", code, errOut)
	}
	if !strings.Contains(out, "not running: no socket at "+filepath.Join(dir, "podsync.sock")) {
		t.Fatalf("status does not say podsync is not running:\n%s", out)
	}
	out, _, _ = ctl("--socket-dir="+dir, "status", "-o", "json")
	var rows []serviceStatus
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 6 {
		t.Fatalf("status -o json: %v, %d rows\n%s", err, len(rows), out)
	}
	if !rows[0].Reachable || rows[0].PID != int32(os.Getpid()) || rows[1].SocketPresent {
		t.Fatalf("status -o json rows: %+v", rows[:2])
	}
}

func TestStatusSaysConfigIsDegraded(t *testing.T) {
	dir := serveConfig(t, &configv1.ReloadStatus{Generation: 7, LastError: "/etc/unitlet/config.yaml: field syncFrequency: bad"})
	out, _, code := ctl("--socket-dir="+dir, "status", "config")
	if code != 0 || !strings.Contains(out, "degraded: the configuration did not load (/etc/unitlet/config.yaml: field syncFrequency: bad); generation 7 stays in effect") {
		t.Fatalf("status config with a failed load: exit %d\n%s", code, out)
	}
	out, _, _ = ctl("--socket-dir="+dir, "status", "config", "-o", "json")
	var rows []serviceStatus
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || !rows[0].Degraded {
		t.Fatalf("status config -o json: %v\n%s", err, out)
	}
}

func TestConfig(t *testing.T) {
	dir := serveConfig(t, &configv1.ReloadStatus{
		LastError: "/etc/unitlet/config.yaml: field syncFrequency: bad", Trigger: "file-change",
		LastAttemptTime: timestamppb.Now(), LastSuccessTime: timestamppb.Now(),
	})
	out, _, code := ctl("--socket-dir="+dir, "config")
	for _, want := range []string{"# generation: 7", "file /etc/unitlet/config.yaml (sha256 0123456789ab)", "FAILED", "field syncFrequency", "generation 7 stays in effect", "maxPods: 42", "node: node-a, IPs 192.0.2.1"} {
		if !strings.Contains(out, want) {
			t.Errorf("config output lacks %q:\n%s", want, out)
		}
	}
	if code != 0 {
		t.Errorf("exit %d", code)
	}
	out2, _, _ := ctl("--socket-dir="+dir, "config", "-o", "json")
	var kc map[string]any
	if err := json.Unmarshal([]byte(out2), &kc); err != nil || kc["maxPods"] != float64(42) {
		t.Fatalf("config -o json: %v\n%s", err, out2)
	}
	for _, o := range []string{out, out2} {
		if strings.Contains(o, "s3cr3t") || !strings.Contains(o, "<redacted>") {
			t.Errorf("the staticPodURLHeader value is shown, or its redaction is not:\n%s", o)
		}
	}
}

// TestConfigAsksTheOthersWithinTheirOwnTimeout: the services' generations line asks each
// service within its own --timeout, not within what unitlet-config's calls left of theirs
// (a slow unitlet-config once made a running unitlet-status read "not running"). Here
// unitlet-config's bootstrap status, which the output can do without, takes longer than
// the timeout.
func TestConfigAsksTheOthersWithinTheirOwnTimeout(t *testing.T) {
	dir := serveFakeConfig(t, fakeConfig{status: &configv1.ReloadStatus{LastReloadSuccessful: true}, bootDelay: time.Minute})
	serveDaemon(t, dir, "status", func(*daemon.Daemon) {})
	out, errOut, code := ctl("--socket-dir="+dir, "config")
	if code != 0 {
		t.Fatalf("config: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"status (does not report it)", "podsync not running"} {
		if !strings.Contains(out, want) {
			t.Errorf("config's generations line lacks %q:\n%s", want, out)
		}
	}
}

func TestConfigRefusesAnUnknownSchema(t *testing.T) {
	dir := serveFakeConfig(t, fakeConfig{status: &configv1.ReloadStatus{}, schema: "kubelet.config.k8s.io/v1.KubeletConfiguration"})
	out, errOut, code := ctl("--socket-dir="+dir, "config")
	want := `unitlet.config.v1.NodeConfig.kubelet_configuration: unknown schema "kubelet.config.k8s.io/v1.KubeletConfiguration" in kubelet_configuration_schema`
	if code != 1 || !strings.Contains(errOut, want) || strings.Contains(out, "maxPods") {
		t.Errorf("config in an unknown schema: exit %d, stderr %q, stdout %q; want exit 1 naming it, nothing shown", code, errOut, out)
	}
}

func TestConfigBootstrap(t *testing.T) {
	notAfter := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	dir := serveFakeConfig(t, fakeConfig{boot: &configv1.BootstrapStatus{
		State: configv1.BootstrapState_BOOTSTRAP_STATE_DONE, Message: "wrote /var/lib/unitlet/kubeconfig",
		Attempts: 2, CsrName: "csr-abc12", CertificateNotAfter: timestamppb.New(notAfter),
		LastTransitionTime: timestamppb.Now(),
	}})
	out, _, code := ctl("--socket-dir="+dir, "config", "bootstrap")
	for _, want := range []string{"STATE", "DONE", "csr-abc12", "wrote /var/lib/unitlet/kubeconfig", notAfter.Local().Format(time.RFC3339)} {
		if !strings.Contains(out, want) {
			t.Errorf("config bootstrap output lacks %q:\n%s", want, out)
		}
	}
	if code != 0 {
		t.Errorf("exit %d", code)
	}
	out, _, code = ctl("--socket-dir="+dir, "config", "bootstrap", "-o", "json")
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 {
		t.Fatalf("config bootstrap -o json: exit %d, %v\n%s", code, err, out)
	}
	if st["state"] != "BOOTSTRAP_STATE_DONE" || st["csrName"] != "csr-abc12" || st["attempts"] != float64(2) {
		t.Errorf("config bootstrap -o json: %v", st)
	}

	// An older unitlet-config: the error says so.
	old := serveConfig(t, &configv1.ReloadStatus{})
	_, errOut, code := ctl("--socket-dir="+old, "config", "bootstrap")
	if code != 1 || !strings.Contains(errOut, "does not report its TLS bootstrap") {
		t.Errorf("config bootstrap against an older unitlet-config: exit %d %q", code, errOut)
	}
	if _, _, code := ctl("--socket-dir="+dir, "config", "frobnicate"); code != 2 {
		t.Errorf("config frobnicate: exit %d, want 2", code)
	}
}

func TestNotRunningAndUsage(t *testing.T) {
	dir := t.TempDir()
	_, errOut, code := ctl("--socket-dir="+dir, "config")
	if code != 1 || !strings.Contains(errOut, "unitlet-config is not running: no socket at") {
		t.Fatalf("config with no service: exit %d %q", code, errOut)
	}
	for _, args := range [][]string{{"frobnicate"}, {"-o", "xml", "status"}, {"status", "nosuch"}, {}} {
		if _, _, code := ctl(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if out, _, code := ctl("version"); code != 0 || !strings.HasPrefix(out, "unitletctl ") {
		t.Errorf("version: %d %q", code, out)
	}
}
