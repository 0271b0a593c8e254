package cis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
)

// goodConfig is a KubeletConfiguration that passes every check (defaults applied, as
// unitlet-config serves it).
const goodConfig = `{
  "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
  "address": "0.0.0.0", "port": 10250, "readOnlyPort": 0,
  "authentication": {"anonymous": {"enabled": false}, "webhook": {"enabled": true}, "x509": {"clientCAFile": "/etc/unitlet/pki/ca.crt"}},
  "authorization": {"mode": "Webhook"},
  "streamingConnectionIdleTimeout": "4h0m0s",
  "makeIPTablesUtilChains": true,
  "eventRecordQPS": 50, "eventBurst": 100,
  "rotateCertificates": true, "serverTLSBootstrap": true,
  "protectKernelDefaults": true,
  "podPidsLimit": 4096
}`

// fakeNode is a node as System sees it: a unit set, files with modes, a process, a node API.
type fakeNode struct {
	config   string // KubeletConfiguration JSON
	files    map[string]File
	contents map[string]string
	show     map[string]string // systemctl args joined by " " -> output
	api      NodeAPI
	virt     string
	// listening are the TCP sockets of each pid; a pid not here cannot be read.
	listening map[int][]string
	// pages are what each dialled address answers; any other answers 404 to every page,
	// as a listener serving /healthz alone.
	pages map[string]HTTPProbe
}

// showUnits is the systemctl command that reads the units of goodFakeNode's unitlet.target.
const showUnits = "show -p Id -p FragmentPath -p DropInPaths -p ActiveState -p MainPID unitlet-certs.service unitlet-config.service unitlet-config.socket unitlet-eviction.service unitlet-volumes.service unitlet.target"

func goodFakeNode() *fakeNode {
	f := &fakeNode{
		config:   goodConfig,
		files:    map[string]File{},
		contents: map[string]string{},
		show:     map[string]string{},
		// config's, certs' and eviction's /healthz listeners; eviction also listens on every
		// address, as a node API would.
		listening: map[int][]string{42: {"127.0.0.1:10271"}, 43: {"127.0.0.1:10275"}, 44: {"127.0.0.1:10276", "[::]:10250"}},
		pages: map[string]HTTPProbe{
			"[::1]:10250": {Address: "[::1]:10250", Scheme: "https", Status: statusOfEvery(http.StatusUnauthorized)},
		},
		api: NodeAPI{Address: "127.0.0.1:10250", AnonymousStatus: 401, CertSubject: "CN=system:node:node-1,O=system:nodes", CertIssuer: "CN=cluster-ca",
			SuitesProbed: []string{"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"}},
	}
	for _, p := range []string{
		"/etc/systemd/system/unitlet.target", "/etc/systemd/system/unitlet-config.service", "/etc/systemd/system/unitlet-config.socket",
		"/etc/systemd/system/unitlet-certs.service", "/etc/systemd/system/unitlet-eviction.service", "/etc/systemd/system/unitlet-config.service.d/site.conf",
		"/etc/unitlet/config.yaml", "/etc/unitlet/config.d/10-site.conf", "/etc/unitlet/pki/ca.crt",
		"/var/lib/unitlet/kubeconfig", "/etc/unitlet/bootstrap.kubeconfig",
		"/var/lib/unitlet/pki/kubelet-client-2026-01-01-00-00-00.pem", "/var/lib/unitlet/pki/kubelet-server-2026-01-01-00-00-00.pem",
	} {
		f.files[p] = File{Path: p, Exists: true, Mode: 0o600, User: "root", Group: "root"}
	}
	f.contents["/var/lib/unitlet/kubeconfig"] = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://api:6443", certificate-authority: /etc/unitlet/pki/ca.crt}}]
users: [{name: u, user: {client-certificate: pki/kubelet-client-current.pem, client-key: pki/kubelet-client-current.pem}}]
`
	f.files["/var/lib/unitlet/pki/kubelet-client-current.pem"] = File{Path: "/var/lib/unitlet/pki/kubelet-client-current.pem", Exists: true, Mode: 0o600, User: "root", Group: "root"}
	f.contents["/proc/42/cmdline"] = "/usr/bin/unitlet-config\x00--config=/etc/unitlet/config.yaml\x00--config-dir=/etc/unitlet/config.d\x00"
	f.contents["/proc/42/environ"] = "UNITLET_SOCKET_DIR=/run/unitlet\x00GOTRACEBACK=crash\x00"
	for k, v := range kernelDefaults {
		f.contents[filepath.Join("/proc/sys", strings.ReplaceAll(k, ".", "/"))] = v + "\n"
	}
	f.show["show -p Wants -p ConsistsOf -p LoadState unitlet.target"] = "Wants=unitlet-config.socket unitlet-config.service unitlet-certs.service unitlet-eviction.service unitlet-volumes.service\nConsistsOf=unitlet-config.service unitlet-config.socket unitlet-certs.service unitlet-eviction.service\nLoadState=loaded\n"
	f.show[showUnits] = `Id=unitlet-certs.service
FragmentPath=/etc/systemd/system/unitlet-certs.service
DropInPaths=
ActiveState=active
MainPID=43

Id=unitlet-config.service
FragmentPath=/etc/systemd/system/unitlet-config.service
DropInPaths=/etc/systemd/system/unitlet-config.service.d/site.conf
ActiveState=active
MainPID=42

Id=unitlet-config.socket
FragmentPath=/etc/systemd/system/unitlet-config.socket
DropInPaths=
ActiveState=active
MainPID=0

Id=unitlet-eviction.service
FragmentPath=/etc/systemd/system/unitlet-eviction.service
DropInPaths=
ActiveState=active
MainPID=44

Id=unitlet-volumes.service
FragmentPath=
DropInPaths=
ActiveState=inactive
MainPID=0

Id=unitlet.target
FragmentPath=/etc/systemd/system/unitlet.target
DropInPaths=
ActiveState=active
MainPID=0
`
	return f
}

func (f *fakeNode) NodeConfig(context.Context) (*configv1.NodeConfig, error) {
	if f.config == "" {
		return nil, errors.New("unavailable")
	}
	return &configv1.NodeConfig{
		Generation:           1,
		KubeletConfiguration: []byte(f.config),
		Sources: []*configv1.Source{
			{Kind: configv1.SourceKind_SOURCE_KIND_DEFAULTS},
			{Kind: configv1.SourceKind_SOURCE_KIND_FILE, Name: "/etc/unitlet/config.yaml"},
			{Kind: configv1.SourceKind_SOURCE_KIND_DROP_IN, Name: "/etc/unitlet/config.d/10-site.conf"},
		},
		Node:     &configv1.NodeIdentity{Name: "node-1", Hostname: "node-1"},
		Paths:    &configv1.Paths{Kubeconfig: "/var/lib/unitlet/kubeconfig", BootstrapKubeconfig: "/etc/unitlet/bootstrap.kubeconfig", CertDir: "/var/lib/unitlet/pki", RootDir: "/var/lib/unitlet"},
		LoadTime: timestamppb.New(time.Unix(0, 0)),
	}, nil
}

func (f *fakeNode) Systemctl(_ context.Context, args ...string) (string, error) {
	out, ok := f.show[strings.Join(args, " ")]
	if !ok {
		return "", fmt.Errorf("systemctl %s: not faked", strings.Join(args, " "))
	}
	return out, nil
}

func (f *fakeNode) Stat(path string) File {
	if st, ok := f.files[path]; ok {
		return st
	}
	return File{Path: path}
}

func (f *fakeNode) ReadFile(path string) ([]byte, error) {
	if c, ok := f.contents[path]; ok {
		return []byte(c), nil
	}
	return nil, os.ErrNotExist
}

func (f *fakeNode) RegularFiles(dir string) ([]string, error) {
	var out []string
	for p := range f.files {
		if filepath.Dir(p) == dir && !strings.HasSuffix(p, "-current.pem") {
			out = append(out, p)
		}
	}
	return out, nil
}

func (f *fakeNode) Container(context.Context) string { return f.virt }

func (f *fakeNode) ProbeNodeAPI(_ context.Context, address string) NodeAPI {
	a := f.api
	a.Address = address
	return a
}

func (f *fakeNode) ListeningTCP(pid int) ([]string, error) {
	addrs, ok := f.listening[pid]
	if !ok {
		return nil, fmt.Errorf("open /proc/%d/fd: permission denied", pid)
	}
	return addrs, nil
}

func (f *fakeNode) ProbeHTTP(_ context.Context, address string, paths []string) HTTPProbe {
	if p, ok := f.pages[address]; ok {
		return p
	}
	return HTTPProbe{Address: address, Scheme: "http", Status: statusOfEvery(http.StatusNotFound)}
}

// statusOfEvery answers code to every protected page.
func statusOfEvery(code int) map[string]int {
	m := map[string]int{}
	for _, p := range protectedPages {
		m[p] = code
	}
	return m
}

// results collects f and runs the checks: result by ID.
func results(t *testing.T, f *fakeNode) (map[string]Finding, []string) {
	t.Helper()
	n, problems := Collect(context.Background(), f)
	got := map[string]Finding{}
	for _, fd := range Run(n) {
		got[fd.ID] = fd
	}
	return got, problems
}

func TestGoodNodePassesEveryApplicableCheck(t *testing.T) {
	got, problems := results(t, goodFakeNode())
	if len(problems) > 0 {
		t.Errorf("problems: %v", problems)
	}
	want := map[string]Result{"4.1.3": NotApplicable, "4.1.4": NotApplicable, "4.2.6": NotApplicable}
	if len(got) != len(checks()) {
		t.Errorf("%d findings, want %d", len(got), len(checks()))
	}
	for id, fd := range got {
		w := want[id]
		if w == "" {
			w = Pass
		}
		if fd.Result != w {
			t.Errorf("%s: %s (%s), want %s; evidence %v", id, fd.Result, fd.Reason, w, fd.Evidence)
		}
	}
	// The units examined are every one systemd has of unitlet.target, with drop-ins; an
	// uninstalled unit (no fragment) is not one of them.
	ev := strings.Join(got["4.1.1"].Evidence, "\n")
	for _, p := range []string{"unitlet.target", "unitlet-config.socket", "unitlet-config.service.d/site.conf", "unitlet-certs.service", "unitlet-eviction.service"} {
		if !strings.Contains(ev, p) {
			t.Errorf("4.1.1 evidence lacks %s:\n%s", p, ev)
		}
	}
	if strings.Contains(ev, "volumes") {
		t.Errorf("4.1.1 examined a unit that is not installed:\n%s", ev)
	}
	// The kubeconfig's relative paths are taken from its directory.
	if ev := strings.Join(got["4.1.U1"].Evidence, "\n"); !strings.Contains(ev, "/var/lib/unitlet/pki/kubelet-client-current.pem 0600 root:root") {
		t.Errorf("4.1.U1 evidence lacks the kubeconfig's client certificate:\n%s", ev)
	}
}

// Each case breaks one thing on an otherwise good node and expects that check to fail.
func TestChecksFailOnBadSettings(t *testing.T) {
	setMode := func(path string, mode os.FileMode) func(*fakeNode) {
		return func(f *fakeNode) { st := f.files[path]; st.Mode = mode; f.files[path] = st }
	}
	setOwner := func(path string, uid, gid uint32) func(*fakeNode) {
		return func(f *fakeNode) {
			st := f.files[path]
			st.UID, st.GID, st.User, st.Group = uid, gid, fmt.Sprint(uid), fmt.Sprint(gid)
			f.files[path] = st
		}
	}
	setConfig := func(old, new string) func(*fakeNode) {
		return func(f *fakeNode) {
			if !strings.Contains(f.config, old) {
				panic("no " + old + " in the config")
			}
			f.config = strings.Replace(f.config, old, new, 1)
		}
	}
	cases := []struct {
		name   string
		id     string
		break_ func(*fakeNode)
	}{
		{"unit file 0644", "4.1.1", setMode("/etc/systemd/system/unitlet-config.service", 0o644)},
		{"drop-in 0640", "4.1.1", setMode("/etc/systemd/system/unitlet-config.service.d/site.conf", 0o640)},
		{"target not root's", "4.1.2", setOwner("/etc/systemd/system/unitlet.target", 1000, 0)},
		{"socket unit group not root", "4.1.2", setOwner("/etc/systemd/system/unitlet-config.socket", 0, 100)},
		{"eviction unit 0644", "4.1.1", setMode("/etc/systemd/system/unitlet-eviction.service", 0o644)},
		{"eviction unit not root's", "4.1.2", setOwner("/etc/systemd/system/unitlet-eviction.service", 0, 100)},
		{"proxy kubeconfig 0644", "4.1.3", func(f *fakeNode) {
			f.files["/var/lib/kube-proxy/kubeconfig.conf"] = File{Path: "/var/lib/kube-proxy/kubeconfig.conf", Exists: true, Mode: 0o644}
		}},
		{"proxy kubeconfig not root's", "4.1.4", func(f *fakeNode) {
			f.files["/etc/kubernetes/proxy.conf"] = File{Path: "/etc/kubernetes/proxy.conf", Exists: true, Mode: 0o600, UID: 7}
		}},
		{"kubeconfig 0644", "4.1.5", setMode("/var/lib/unitlet/kubeconfig", 0o644)},
		{"bootstrap kubeconfig 0604", "4.1.5", setMode("/etc/unitlet/bootstrap.kubeconfig", 0o604)},
		{"kubeconfig missing", "4.1.5", func(f *fakeNode) { delete(f.files, "/var/lib/unitlet/kubeconfig") }},
		{"kubeconfig not root's", "4.1.6", setOwner("/var/lib/unitlet/kubeconfig", 0, 5)},
		{"client CA 0644", "4.1.7", setMode("/etc/unitlet/pki/ca.crt", 0o644)},
		{"client CA not root's", "4.1.8", setOwner("/etc/unitlet/pki/ca.crt", 1, 1)},
		{"config file 0644", "4.1.9", setMode("/etc/unitlet/config.yaml", 0o644)},
		{"drop-in config 0666", "4.1.9", setMode("/etc/unitlet/config.d/10-site.conf", 0o666)},
		{"config file not root's", "4.1.10", setOwner("/etc/unitlet/config.yaml", 1000, 1000)},
		{"key 0644", "4.1.U1", setMode("/var/lib/unitlet/pki/kubelet-server-2026-01-01-00-00-00.pem", 0o644)},
		{"key not root's", "4.1.U1", setOwner("/var/lib/unitlet/pki/kubelet-client-2026-01-01-00-00-00.pem", 0, 998)},
		{"anonymous on", "4.2.1", setConfig(`"anonymous": {"enabled": false}`, `"anonymous": {"enabled": true}`)},
		{"node API serves anonymous", "4.2.1", func(f *fakeNode) { f.api.AnonymousStatus = 200 }},
		{"AlwaysAllow", "4.2.2", setConfig(`"mode": "Webhook"`, `"mode": "AlwaysAllow"`)},
		{"no client CA", "4.2.3", setConfig(`"clientCAFile": "/etc/unitlet/pki/ca.crt"`, `"clientCAFile": ""`)},
		{"client CA missing", "4.2.3", func(f *fakeNode) { delete(f.files, "/etc/unitlet/pki/ca.crt") }},
		{"read-only port", "4.2.4", setConfig(`"readOnlyPort": 0`, `"readOnlyPort": 10255`)},
		{"a unit serves its metrics and /configz on TCP", "4.2.4", func(f *fakeNode) {
			st := statusOfEvery(http.StatusNotFound)
			st["/metrics"], st["/configz"] = 200, 200
			f.pages["127.0.0.1:10271"] = HTTPProbe{Address: "127.0.0.1:10271", Scheme: "http", Status: st}
		}},
		{"a unit serves a page on every address", "4.2.4", func(f *fakeNode) {
			f.listening[43] = append(f.listening[43], "0.0.0.0:9100")
			st := statusOfEvery(http.StatusNotFound)
			st["/debug/pprof/"] = 301
			f.pages["127.0.0.1:9100"] = HTTPProbe{Address: "127.0.0.1:9100", Scheme: "http", Status: st}
		}},
		{"a unit's sockets cannot be read", "4.2.4", func(f *fakeNode) { delete(f.listening, 44) }},
		{"a unit's listener cannot be asked", "4.2.4", func(f *fakeNode) {
			f.pages["127.0.0.1:10275"] = HTTPProbe{Address: "127.0.0.1:10275", Err: "GET /metrics: connection reset by peer"}
		}},
		{"idle timeout 0", "4.2.5", setConfig(`"streamingConnectionIdleTimeout": "4h0m0s"`, `"streamingConnectionIdleTimeout": "0s"`)},
		{"hostname override flag", "4.2.7", func(f *fakeNode) { f.contents["/proc/42/cmdline"] += "--hostname-override=other\x00" }},
		{"hostname override variable", "4.2.7", func(f *fakeNode) { f.contents["/proc/42/environ"] += "UNITLET_HOSTNAME_OVERRIDE=other\x00" }},
		{"negative event QPS", "4.2.8", setConfig(`"eventRecordQPS": 50`, `"eventRecordQPS": -1`)},
		{"self-signed serving certificate", "4.2.9", setConfig(`"serverTLSBootstrap": true`, `"serverTLSBootstrap": false`)},
		{"serving CSR not approved", "4.2.9", func(f *fakeNode) { f.api.SelfSigned = true }},
		{"tlsCertFile missing", "4.2.9", setConfig(`"readOnlyPort": 0`, `"readOnlyPort": 0, "tlsCertFile": "/etc/unitlet/pki/node.crt", "tlsPrivateKeyFile": "/etc/unitlet/pki/node.key"`)},
		{"no rotation", "4.2.10", setConfig(`"rotateCertificates": true`, `"rotateCertificates": false`)},
		{"unitlet-certs not running", "4.2.10", func(f *fakeNode) {
			k := showUnits
			f.show[k] = strings.Replace(f.show[k], "ActiveState=active\nMainPID=43", "ActiveState=failed\nMainPID=0", 1)
		}},
		{"no serving rotation", "4.2.11", setConfig(`"serverTLSBootstrap": true`, `"serverTLSBootstrap": false`)},
		{"weak suite configured", "4.2.12", setConfig(`"readOnlyPort": 0`, `"readOnlyPort": 0, "tlsCipherSuites": ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"]`)},
		{"weak suite accepted", "4.2.12", func(f *fakeNode) { f.api.WeakSuitesAccepted = []string{"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"} }},
		{"suites unknown", "4.2.12", func(f *fakeNode) { f.api = NodeAPI{Err: "connection refused"} }},
		{"no pod PIDs limit", "4.2.13", setConfig(`"podPidsLimit": 4096`, `"podPidsLimit": -1`)},
		{"pod PIDs limit unset", "4.2.13", setConfig(`,
  "podPidsLimit": 4096`, ``)},
		{"kernel defaults off", "4.2.K1", setConfig(`"protectKernelDefaults": true`, `"protectKernelDefaults": false`)},
		{"kernel tunable differs", "4.2.K1", func(f *fakeNode) { f.contents["/proc/sys/kernel/panic"] = "0\n" }},
		{"config unavailable", "4.2.1", func(f *fakeNode) { f.config = "" }},
		{"systemd has no unitlet.target", "4.1.1", func(f *fakeNode) {
			f.show["show -p Wants -p ConsistsOf -p LoadState unitlet.target"] = "Wants=\nConsistsOf=\nLoadState=not-found\n"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := goodFakeNode()
			c.break_(f)
			got, _ := results(t, f)
			fd := got[c.id]
			if fd.Result != Fail {
				t.Fatalf("%s: %s (%s), want FAIL; evidence %v", c.id, fd.Result, fd.Reason, fd.Evidence)
			}
			t.Logf("%s FAIL: %s", c.id, fd.Reason)
		})
	}
}

func TestNotApplicableSaysWhy(t *testing.T) {
	// An nspawn machine shares the host's kernel: protectKernelDefaults false is N/A there.
	f := goodFakeNode()
	f.config = strings.Replace(f.config, `"protectKernelDefaults": true`, `"protectKernelDefaults": false`, 1)
	f.virt = "systemd-nspawn"
	f.contents["/proc/sys/vm/overcommit_memory"] = "0"
	got, _ := results(t, f)
	if fd := got["4.2.K1"]; fd.Result != NotApplicable || !strings.Contains(fd.Reason, "systemd-nspawn") || !strings.Contains(fd.Reason, "vm.overcommit_memory") {
		t.Errorf("4.2.K1 in a container: %s (%s), want N/A naming the container and the tunable", fd.Result, fd.Reason)
	}
	// A standalone node has no kubeconfig and no certificates to rotate.
	f = goodFakeNode()
	sa := &standaloneNode{f}
	n, _ := Collect(context.Background(), sa)
	for _, fd := range Run(n) {
		switch fd.ID {
		case "4.1.5", "4.1.6", "4.2.10", "4.2.11":
			if fd.Result != NotApplicable || fd.Reason == "" {
				t.Errorf("%s on a standalone node: %s (%s), want N/A with a reason", fd.ID, fd.Result, fd.Reason)
			}
		}
	}
	// Every N/A has a reason.
	got, _ = results(t, goodFakeNode())
	for _, fd := range got {
		if fd.Result == NotApplicable && fd.Reason == "" {
			t.Errorf("%s: N/A without a reason", fd.ID)
		}
	}
}

// standaloneNode is a fakeNode whose unitlet-config has no kubeconfig.
type standaloneNode struct{ *fakeNode }

func (s *standaloneNode) NodeConfig(ctx context.Context) (*configv1.NodeConfig, error) {
	nc, err := s.fakeNode.NodeConfig(ctx)
	if err != nil {
		return nil, err
	}
	nc.Paths.Kubeconfig, nc.Paths.BootstrapKubeconfig = "", ""
	return nc, nil
}

func TestProcessFromUnitWhenNotRunning(t *testing.T) {
	f := goodFakeNode()
	k := showUnits
	f.show[k] = strings.Replace(f.show[k], "MainPID=42", "MainPID=0", 1)
	f.show["show -p ExecStart -p Environment unitlet-config.service"] = "ExecStart={ path=/usr/bin/unitlet-config ; argv[]=/usr/bin/unitlet-config --config=/etc/unitlet/config.yaml --hostname-override=x ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }\nEnvironment=UNITLET_SOCKET_DIR=/run/unitlet GOTRACEBACK=crash\n"
	got, _ := results(t, f)
	fd := got["4.2.7"]
	if fd.Result != Fail || !strings.Contains(strings.Join(fd.Evidence, " "), "not running") {
		t.Errorf("4.2.7 from the unit: %s (%s) %v, want FAIL read from the unit", fd.Result, fd.Reason, fd.Evidence)
	}
}

func TestHostStat(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	st := Host{}.Stat(p)
	if !st.Exists || st.Mode.Perm() != 0o640 || st.UID != uint32(os.Getuid()) {
		t.Errorf("Stat(%s) = %+v, want mode 0640 owned by uid %d", p, st, os.Getuid())
	}
	if restrictive(st) {
		t.Errorf("0640 counted as 600 or more restrictive")
	}
	if st := (Host{}).Stat(filepath.Join(dir, "none")); st.Exists || st.Err != "" {
		t.Errorf("Stat of a missing file: %+v", st)
	}
	files, err := Host{}.RegularFiles(dir)
	if err != nil || len(files) != 1 || files[0] != p {
		t.Errorf("RegularFiles(%s) = %v, %v", dir, files, err)
	}
}

func TestNodeAPIAddress(t *testing.T) {
	for _, c := range []struct {
		address string
		port    int32
		want    string
	}{
		{"0.0.0.0", 10250, "127.0.0.1:10250"},
		{"", 0, "127.0.0.1:10250"},
		{"::", 20250, "[::1]:20250"},
		{"10.0.2.15", 10250, "10.0.2.15:10250"},
	} {
		if got := nodeAPIAddress(c.address, c.port); got != c.want {
			t.Errorf("nodeAPIAddress(%q, %d) = %s, want %s", c.address, c.port, got, c.want)
		}
	}
}

func TestWriteTable(t *testing.T) {
	got, _ := results(t, goodFakeNode())
	r := &Report{Benchmark: Benchmark, Node: "node-1"}
	for _, c := range checks() {
		r.Findings = append(r.Findings, got[c.id])
	}
	var b bytes.Buffer
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "4.2.13  PASS") || !strings.Contains(b.String(), fmt.Sprintf("%d checks: %d PASS, 0 FAIL, 3 N/A", len(checks()), len(checks())-3)) {
		t.Errorf("table:\n%s", b.String())
	}
}

// 4.2.4 names the unit, its pid, the address and the pages it served without credentials.
func TestReadOnlyPortNamesTheListenerThatServesPages(t *testing.T) {
	f := goodFakeNode()
	got, _ := results(t, f)
	fd := got["4.2.4"]
	ev := strings.Join(fd.Evidence, "\n")
	if fd.Result != Pass || !strings.Contains(fd.Reason, "4 TCP listeners") ||
		!strings.Contains(ev, "unitlet-config.service (pid 42) on 127.0.0.1:10271, http://127.0.0.1:10271 without credentials: served none; refused /metrics 404") ||
		!strings.Contains(ev, "unitlet-eviction.service (pid 44) on [::]:10250, https://[::1]:10250 without credentials: served none; refused /metrics 401") {
		t.Errorf("4.2.4 on a good node: %s (%s), evidence:\n%s", fd.Result, fd.Reason, ev)
	}

	st := statusOfEvery(http.StatusNotFound)
	st["/metrics"], st["/metrics/probes"], st["/configz"] = 200, 200, 200
	f.pages["127.0.0.1:10271"] = HTTPProbe{Address: "127.0.0.1:10271", Scheme: "http", Status: st}
	got, _ = results(t, f)
	fd = got["4.2.4"]
	want := "unitlet-config.service (pid 42) on 127.0.0.1:10271 serves /metrics 200, /metrics/probes 200, /configz 200 without credentials"
	if fd.Result != Fail || !strings.Contains(fd.Reason, want) {
		t.Errorf("4.2.4 with pages on TCP: %s (%s), want FAIL naming %q", fd.Result, fd.Reason, want)
	}
}

func TestListeningIn(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:280F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0
   1: 00000000:280A 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 100 0 0 10 0
   2: 0100007F:280F 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2000 1 0000000000000000 100 0 0 10 0
`
	tcp6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:280A 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1004 1 0000000000000000 100 0 0 10 0
`
	inodes := map[string]bool{"1001": true, "1002": true, "1003": true, "1004": true}
	got, err := listeningIn([]byte(tcp), inodes)
	if err != nil || strings.Join(got, " ") != "127.0.0.1:10255 0.0.0.0:10250" {
		t.Errorf("tcp: %v %v, want the two listening sockets of the process (not its connection, not another process's)", got, err)
	}
	got, err = listeningIn([]byte(tcp6), inodes)
	if err != nil || strings.Join(got, " ") != "[::1]:10250" {
		t.Errorf("tcp6: %v %v, want [::1]:10250", got, err)
	}
	if _, err := listeningIn([]byte("header\n 0: garbage\n"), inodes); err == nil {
		t.Error("a line that does not parse: want an error")
	}
}

// Host finds this process's own listener and asks it as a client would: plain HTTP, or
// TLS when it speaks it.
func TestHostListeningTCPAndProbeHTTP(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("prober_probe_total 1")) })
	plain := httptest.NewServer(mux)
	defer plain.Close()
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "Unauthorized", http.StatusUnauthorized) }))
	defer secure.Close()

	h := Host{Timeout: 5 * time.Second}
	addrs, err := h.ListeningTCP(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*httptest.Server{plain, secure} {
		if a := s.Listener.Addr().String(); !slices.Contains(addrs, a) {
			t.Errorf("ListeningTCP(self) = %v, lacks %s", addrs, a)
		}
	}
	p := h.ProbeHTTP(context.Background(), plain.Listener.Addr().String(), []string{"/metrics", "/configz"})
	if p.Err != "" || p.Scheme != "http" || p.Status["/metrics"] != 200 || p.Status["/configz"] != 404 {
		t.Errorf("plain HTTP: %+v, want http, /metrics 200, /configz 404", p)
	}
	p = h.ProbeHTTP(context.Background(), secure.Listener.Addr().String(), []string{"/pods"})
	if p.Err != "" || p.Scheme != "https" || p.Status["/pods"] != 401 {
		t.Errorf("TLS: %+v, want https, /pods 401", p)
	}
}
