package harnesstest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/reflect/protoreflect"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/integration"
	"github.com/unitlet/unitlet/integration/harness"
	certsv1 "github.com/unitlet/unitlet/proto/unitlet/certs/v1"
	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	statusv1 "github.com/unitlet/unitlet/proto/unitlet/status/v1"
	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
	"github.com/unitlet/unitlet/shared/bus"
)

// Mixed versions are a contract (issue 23): a node upgrades one unit at a time, so every
// service must work with each neighbour one release older or newer. TestMixedVersions runs
// each service of node-1 at the previous release (UNITLET_PREV_BIN_DIR, built by
// `make prev-release` from the Makefile's PREV_RELEASE) with the others at this build, then
// each at this build with the others at the previous release, and drives every bus call
// between them through real behaviour. mixedVersionCalls says which exercise drives which
// call; TestMixedVersionsCoverEveryBusRPC keeps it in step with the protos, so no RPC is
// added without compat coverage.

// busCall is one RPC one unitlet program calls on another, and how each step drives it.
type busCall struct {
	caller, callee string
	// rpc is the full method name, "unitlet.podsync.v1.PodSyncService/WatchPods".
	rpc string
	// exercise is the step's exercise that drives the call (a column of the printed table).
	exercise string
	how      string
}

// The exercises of a step, in the order they run (the printed table's columns).
const (
	exVersions = "versions"
	exConfig   = "config-watch"
	exPod      = "pod-ready"
	exLogs     = "logs"
	exExec     = "exec"
	exNodeAPI  = "node-api"
	exCtlCur   = "ctl-current"
	exCtlPrev  = "ctl-previous"
	exRotate   = "certs-rotate"
	exKill     = "kill-delete"
)

var mixedExercises = []string{exVersions, exConfig, exPod, exLogs, exExec, exNodeAPI, exCtlCur, exCtlPrev, exRotate, exKill}

// mixedVersionCalls are the bus calls between node-1's programs, found in the code: the
// generated clients' calls in services/ and shared/ (nodeconfig, bus.ListPods),
// unitletctl's in cmd/unitletctl, and unitlet-status's node API handlers (exec, attach and
// port-forward, logs, /pods, /metrics, /stats/summary, /healthz) that call podsync,
// volumes and the daemon API. "every" is each service of the node (daemon/v1 and gRPC
// health are served by all).
var mixedVersionCalls = []busCall{
	{"certs, podsync, status, volumes", "config", "unitlet.config.v1.ConfigService/GetConfig", exVersions,
		"each service reads the configuration when it starts (nodeconfig.Get): every swap restarts one; its GetInfo then answers"},
	{"unitletctl", "config", "unitlet.config.v1.ConfigService/GetConfig", exCtlCur, "unitletctl config"},
	{"certs, podsync, status, volumes", "config", "unitlet.config.v1.ConfigService/WatchConfig", exConfig,
		"a drop-in in /etc/unitlet/config.d changes evictionMaxPodGracePeriod (no node-1 service's field): every follower's GetInfo reaches the new generation without a restart; again when it is removed"},
	{"status, unitletctl", "config", "unitlet.config.v1.ConfigService/GetReloadStatus", exCtlCur,
		"unitletctl status, unitletctl config; status' /healthz (unitlet-config's check fails while its last load failed)"},
	{"unitletctl", "config", "unitlet.config.v1.ConfigService/GetBootstrapStatus", exCtlCur, "unitletctl config bootstrap"},
	{"unitletctl", "certs", "unitlet.certs.v1.CertsService/ListCertificates", exCtlCur, "unitletctl certs"},
	{"unitletctl", "certs", "unitlet.certs.v1.CertsService/WatchCertificates", exRotate, "unitletctl certs rotate serving follows the rotation's states"},
	{"unitletctl", "certs", "unitlet.certs.v1.CertsService/Rotate", exRotate,
		"unitletctl certs rotate serving, by the unitletctl of the other release than certs'; the node API then serves the new serial"},
	{"status", "podsync", "unitlet.podsync.v1.PodSyncService/WatchPods", exPod, "the pod's status reaches the API (Running, Ready, the init container done) only through status' watch"},
	{"status", "podsync", "unitlet.podsync.v1.PodSyncService/GetRuntimeHealth", exNodeAPI, "the node API's /healthz (and the Node's Ready condition)"},
	{"status", "podsync", "unitlet.podsync.v1.PodSyncService/GetStreamingURL", exExec, "kubectl exec through the node API (attach and port-forward ask the same call)"},
	{"status", "podsync", "unitlet.podsync.v1.PodSyncService/ListPodsStream", exLogs, "kubectl logs finds the container's log through podsync's list; the node API's /pods lists the pod"},
	{"volumes", "podsync", "unitlet.podsync.v1.PodSyncService/ListPodsStream", exKill, "volumes' reconcile lists podsync's pods; the deleted pod's volumes are released"},
	{"unitletctl", "podsync", "unitlet.podsync.v1.PodSyncService/ListPodsStream", exCtlCur, "unitletctl pods lists the pod"},
	{"status, volumes, unitletctl", "podsync", "unitlet.podsync.v1.PodSyncService/ListPods", exKill,
		"the callers' fallback for a podsync without ListPodsStream (both releases have it): the test calls it with this build's client, and it lists the pod"},
	{"eviction", "podsync", "unitlet.podsync.v1.PodSyncService/KillPod", exKill,
		"this build's eviction client (eviction is not on node-1: the test calls it as eviction would): the pod ends Failed/Evicted in the API"},
	{"podsync", "volumes", "unitlet.volumes.v1.VolumesService/PrepareVolumes", exPod, "the pod's configMap, secret, projected token and emptyDir volumes, read back by kubectl exec"},
	{"podsync", "volumes", "unitlet.volumes.v1.VolumesService/ReleaseVolumes", exKill, "the deleted pod's mounts are gone from the host"},
	{"status", "volumes", "unitlet.volumes.v1.VolumesService/ListVolumes", exNodeAPI,
		"/stats/summary answers (when status or volumes is the odd one, a summary collected since the pod started, listing it); status logged no failed volume listing during the step"},
	{"unitletctl", "status", "unitlet.status.v1.StatusService/GetNodeStatus", exCtlCur, "unitletctl node"},
	{"status, unitletctl", "every", "unitlet.daemon.v1.DaemonService/GetInfo", exVersions, "the test's and unitletctl status' version check; status' /healthz per service"},
	{"status", "every", "unitlet.daemon.v1.DaemonService/GetMetrics", exNodeAPI,
		"/metrics carries unitlet_build_info of each service at its version, /metrics/probes the pod's probe (podsync's \"probes\" registry)"},
	{"status, unitletctl", "every", "grpc.health.v1.Health/Check", exNodeAPI, "/healthz is ok with each service's check; unitletctl status shows each SERVING"},
}

// evictionOnTheVM is why unitlet-eviction's calls are not run here.
const evictionOnTheVM = "unitlet-eviction is not on node-1; covered on the vm node by TestVMUpgradesOneServiceAtATimeUnderLoad, " +
	"which runs unitlet-eviction at the previous release with current callers"

// mixedVersionExclusions are the bus RPCs the steps do not drive, with the reason.
var mixedVersionExclusions = map[string]string{
	"unitlet.eviction.v1.EvictionService/GetState":        evictionOnTheVM,
	"unitlet.eviction.v1.EvictionService/WatchConditions": evictionOnTheVM,
	"unitlet.eviction.v1.EvictionService/AdmitPod":        evictionOnTheVM,
	"unitlet.podsync.v1.PodSyncService/ReclaimDisk": "only unitlet-eviction calls it, under disk pressure, and it removes the runtime's unused images the suite's pods need; " +
		evictionOnTheVM,
	"grpc.health.v1.Health/Watch": "no unitlet program calls it (systemd's watchdog follows each service's own health, not the bus); grpc-go's health server serves it",
	"grpc.health.v1.Health/List":  "no unitlet program calls it; grpc-go's health server serves it",
}

// busDescriptors are the proto files of the bus: every service's API, daemon/v1 and gRPC
// health, which every service serves.
var busDescriptors = []protoreflect.FileDescriptor{
	configv1.File_unitlet_config_v1_config_proto,
	certsv1.File_unitlet_certs_v1_certs_proto,
	podsyncv1.File_unitlet_podsync_v1_podsync_proto,
	statusv1.File_unitlet_status_v1_status_proto,
	volumesv1.File_unitlet_volumes_v1_volumes_proto,
	evictionv1.File_unitlet_eviction_v1_eviction_proto,
	daemonv1.File_unitlet_daemon_v1_daemon_proto,
	healthpb.File_grpc_health_v1_health_proto,
}

// TestMixedVersionsCoverEveryBusRPC: every RPC of the bus's protos is driven by
// TestMixedVersions (mixedVersionCalls) or excluded with a reason, every proto file of
// proto/unitlet is among busDescriptors, and neither list names an RPC that is gone.
func TestMixedVersionsCoverEveryBusRPC(t *testing.T) {
	t.Parallel()
	rpcs := map[string]bool{}
	files := map[string]bool{}
	for _, fd := range busDescriptors {
		files[fd.Path()] = true
		for i := 0; i < fd.Services().Len(); i++ {
			s := fd.Services().Get(i)
			for j := 0; j < s.Methods().Len(); j++ {
				rpcs[string(s.FullName())+"/"+string(s.Methods().Get(j).Name())] = true
			}
		}
	}
	repo, err := integration.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	onDisk, err := filepath.Glob(filepath.Join(repo, "proto", "unitlet", "*", "*", "*.proto"))
	if err != nil {
		t.Fatal(err)
	}
	if len(onDisk) == 0 {
		t.Fatalf("no proto files under %s/proto/unitlet", repo)
	}
	for _, f := range onDisk {
		rel, _ := filepath.Rel(filepath.Join(repo, "proto"), f)
		if !files[rel] {
			t.Errorf("%s is not among busDescriptors: add its generated package's File_ descriptor, then cover each of its RPCs", rel)
		}
	}
	covered := map[string]bool{}
	for _, c := range mixedVersionCalls {
		covered[c.rpc] = true
		if !rpcs[c.rpc] {
			t.Errorf("mixedVersionCalls names %s, which no bus proto has", c.rpc)
		}
		if !slices.Contains(mixedExercises, c.exercise) {
			t.Errorf("mixedVersionCalls: %s names exercise %q, which TestMixedVersions does not run", c.rpc, c.exercise)
		}
	}
	for rpc, reason := range mixedVersionExclusions {
		if !rpcs[rpc] {
			t.Errorf("mixedVersionExclusions names %s, which no bus proto has", rpc)
		}
		if covered[rpc] {
			t.Errorf("%s is both driven (mixedVersionCalls) and excluded (%s)", rpc, reason)
		}
		if strings.TrimSpace(reason) == "" {
			t.Errorf("mixedVersionExclusions: %s has no reason", rpc)
		}
	}
	var missing []string
	for rpc := range rpcs {
		if !covered[rpc] && mixedVersionExclusions[rpc] == "" {
			missing = append(missing, rpc)
		}
	}
	slices.Sort(missing)
	for _, rpc := range missing {
		t.Errorf("bus RPC %s has no mixed-version coverage: add who calls it and how TestMixedVersions drives it to mixedVersionCalls, "+
			"or a reasoned entry to mixedVersionExclusions", rpc)
	}
	t.Logf("%d bus RPCs: %d driven by TestMixedVersions, %d excluded", len(rpcs), len(covered), len(mixedVersionExclusions))
}

// The two builds of a step.
const (
	current  = "current"
	previous = "previous"
)

// mixedRun is TestMixedVersions' state: the builds, which one each service runs, the rows
// of the printed table.
type mixedRun struct {
	services []string
	bins     map[string]string        // build -> the directory of its binaries
	builds   map[string]harness.Build // build -> its version
	running  map[string]string        // service -> build
	ctl      map[string]string        // build -> its unitletctl in the machine
	rows     []mixedRow
}

type mixedRow struct {
	step    string
	pair    string
	results map[string]string
	took    time.Duration
}

// prevCtlInMachine is where the previous release's unitletctl goes in node-1's machine.
const prevCtlInMachine = "/usr/local/bin/unitletctl-prev"

func TestMixedVersions(t *testing.T) {
	// Serial: swaps node-1's service binaries.
	prevDir, err := harness.PrevBinDir()
	if err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, 90*time.Second)
	m := &mixedRun{
		services: nodeServices,
		bins:     map[string]string{current: filepath.Dir(stack.UnitletBinary("unitletctl")), previous: prevDir},
		builds:   map[string]harness.Build{},
		running:  map[string]string{},
		ctl:      map[string]string{current: "unitletctl", previous: prevCtlInMachine},
	}
	for _, b := range []string{current, previous} {
		build, err := harness.BinaryBuild(filepath.Join(m.bins[b], "unitletctl"))
		if err != nil {
			t.Fatal(err)
		}
		m.builds[b] = build
	}
	if m.builds[current] == m.builds[previous] {
		t.Fatalf("this build and the previous release are both %s (commit %s): nothing would tell them apart; is UNITLET_PREV_BIN_DIR=%s this build's?",
			m.builds[current].Version, m.builds[current].Commit, prevDir)
	}
	t.Logf("previous release %s (%s), this build %s (%s)", m.builds[previous], prevDir, m.builds[current], m.bins[current])
	for _, svc := range m.services {
		m.running[svc] = current
	}
	// Whatever happens, the suite's later tests find node-1 at this build.
	t.Cleanup(func() {
		for _, svc := range m.services {
			info, err := stack.ServiceInfo(context.Background(), podsyncNode, svc)
			if err == nil && info.GetVersion() == m.builds[current].Version && info.GetGitCommit() == m.builds[current].Commit {
				continue
			}
			if _, err := stack.SwapServiceBinary(context.Background(), podsyncNode, svc, m.binary(current, svc)); err != nil {
				t.Errorf("put unitlet-%s of this build back: %v", svc, err)
			}
		}
		_ = stack.Exec(podsyncNode, []string{"rm", "-f", prevCtlInMachine}).Run()
	})
	if err := stack.InstallInNode(podsyncNode, filepath.Join(prevDir, "unitletctl"), prevCtlInMachine); err != nil {
		t.Fatal(err)
	}
	c := admin(t)
	cms, secrets := c.CoreV1().ConfigMaps("default"), c.CoreV1().Secrets("default")
	createObject(t, cms.Create, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mixed-cm"}, Data: map[string]string{"k": "from-configmap"}}, cms.Delete, "mixed-cm")
	createObject(t, secrets.Create, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mixed-secret"}, Data: map[string][]byte{"k": []byte("from-secret")}}, secrets.Delete, "mixed-secret")
	waitDefaultServiceAccount(t, "default")

	start := time.Now()
	// One service at the previous release, the rest at this build: the first unit of a
	// rolling upgrade backwards, or the last one left behind.
	for _, svc := range m.services {
		m.step(t, svc+" previous", svc, map[string]string{svc: previous}, current)
	}
	// One service at this build, the rest at the previous release: the first unit upgraded.
	for _, svc := range m.services {
		m.step(t, svc+" current", svc, map[string]string{svc: current}, previous)
	}
	m.print(t, time.Since(start))
}

// binary is build's binary of svc.
func (m *mixedRun) binary(build, svc string) string {
	return filepath.Join(m.bins[build], "unitlet-"+svc)
}

// other is the build that is not b.
func other(b string) string {
	if b == current {
		return previous
	}
	return current
}

// step brings node-1's services to want (the rest at rest), runs every exercise and
// records the row. A failed exercise fails the test and the exercises after it that need
// its pod are not run.
func (m *mixedRun) step(t *testing.T, name, odd string, want map[string]string, rest string) {
	t.Helper()
	began := time.Now()
	row := mixedRow{step: name, results: map[string]string{}}
	row.pair = fmt.Sprintf("%s %s, rest %s", odd, m.builds[want[odd]], m.builds[rest])
	defer func() {
		row.took = time.Since(began)
		m.rows = append(m.rows, row)
		t.Logf("step %q (%s) took %s", name, row.pair, row.took.Round(100*time.Millisecond))
	}()
	// The odd service goes last: in a chain of steps, the one before it comes back first.
	order := slices.Clone(m.services)
	slices.SortStableFunc(order, func(a, b string) int {
		switch {
		case a == odd:
			return 1
		case b == odd:
			return -1
		}
		return 0
	})
	swaps := 0
	for _, svc := range order {
		b := rest
		if w, ok := want[svc]; ok {
			b = w
		}
		if m.running[svc] == b {
			continue
		}
		if _, err := stack.SwapServiceBinary(context.Background(), podsyncNode, svc, m.binary(b, svc)); err != nil {
			row.results[exVersions] = "FAIL"
			t.Fatalf("step %s: %v\n%s", name, err, stack.Logs(30))
		}
		m.running[svc] = b
		swaps++
	}
	t.Logf("step %q: %d services swapped in %s", name, swaps, time.Since(began).Round(100*time.Millisecond))

	pod := fmt.Sprintf("mixed-%d", len(m.rows)+1)
	ex := &mixedExercise{m: m, t: t, pod: pod, odd: odd, began: time.Now()}
	blocked := ""
	for _, e := range []struct {
		name  string
		run   func() error
		needs string // an exercise whose failure leaves nothing to run this one on
	}{
		{exVersions, ex.versions, ""},
		{exConfig, ex.configWatch, ""},
		{exPod, ex.podReady, ""},
		{exLogs, ex.logs, exPod},
		{exExec, ex.exec, exPod},
		{exNodeAPI, ex.nodeAPI, exPod},
		{exCtlCur, func() error { return ex.ctl(current) }, exPod},
		{exCtlPrev, func() error { return ex.ctl(previous) }, exPod},
		{exRotate, ex.rotate, ""},
		{exKill, ex.killDelete, exPod},
	} {
		if e.needs != "" && row.results[e.needs] != "ok" {
			row.results[e.name] = "-"
			continue
		}
		t0 := time.Now()
		if err := e.run(); err != nil {
			row.results[e.name] = "FAIL"
			blocked = e.name
			t.Errorf("step %s (%s): %s: %v", name, row.pair, e.name, err)
			continue
		}
		row.results[e.name] = "ok"
		t.Logf("step %q: %s ok in %s", name, e.name, time.Since(t0).Round(10*time.Millisecond))
	}
	if blocked != "" {
		t.Logf("the end of the logs after step %s:\n%s", name, stack.Logs(20))
	}
}

// print writes the table of the steps.
func (m *mixedRun) print(t *testing.T, total time.Duration) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "STEP\tPAIR\t%s\tTIME\n", strings.ToUpper(strings.Join(mixedExercises, "\t")))
	for _, r := range m.rows {
		cells := make([]string, 0, len(mixedExercises))
		for _, e := range mixedExercises {
			cell := r.results[e]
			if cell == "" {
				cell = "-"
			}
			cells = append(cells, cell)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.step, r.pair, strings.Join(cells, "\t"), r.took.Round(100*time.Millisecond))
	}
	_ = tw.Flush()
	fmt.Printf("mixed versions on %s (previous release %s, this build %s), %d steps in %s:\n%s",
		podsyncNode, m.builds[previous], m.builds[current], len(m.rows), total.Round(time.Second), b.String())
}

// mixedExercise is one step's exercises on its pod.
type mixedExercise struct {
	m   *mixedRun
	t   *testing.T
	pod string
	uid string
	// odd is the service the step runs at the other build than the rest.
	odd string
	// began is when the step's services were all swapped.
	began time.Time
}

// poll calls cond until it holds or within passes; the error names what was awaited and
// the last state cond gave.
func poll(within time.Duration, what string, cond func(ctx context.Context) (bool, string)) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	last := ""
	for {
		ok, state := cond(ctx)
		if ok {
			return nil
		}
		last = state
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not within %s; last: %s", what, within, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// versions: every service answers GetInfo with the build the step runs it at.
func (e *mixedExercise) versions() error {
	for _, svc := range e.m.services {
		info, err := stack.ServiceInfo(context.Background(), podsyncNode, svc)
		if err != nil {
			return fmt.Errorf("unitlet-%s GetInfo: %w", svc, err)
		}
		want := e.m.builds[e.m.running[svc]]
		if info.GetVersion() != want.Version || info.GetGitCommit() != want.Commit {
			return fmt.Errorf("unitlet-%s runs %s (commit %s), want %s (commit %s)", svc, info.GetVersion(), info.GetGitCommit(), want.Version, want.Commit)
		}
	}
	return nil
}

// configDropIn is the drop-in configWatch writes in node-1's machine.
const configDropIn = "/etc/unitlet/config.d/90-mixed-versions.conf"

// configWatch: a drop-in changes a field none of node-1's services uses; every follower
// takes the new generation from WatchConfig without restarting; again when it goes.
func (e *mixedExercise) configWatch() error {
	pids := map[string]int32{}
	for _, svc := range e.m.services {
		info, err := stack.ServiceInfo(context.Background(), podsyncNode, svc)
		if err != nil {
			return err
		}
		pids[svc] = info.GetPid()
	}
	defer func() { _ = stack.Exec(podsyncNode, []string{"rm", "-f", configDropIn}).Run() }()
	followed := func(what string) error {
		before, err := configGeneration(context.Background())
		if err != nil {
			return err
		}
		return poll(30*time.Second, "every service follows the configuration "+what, func(ctx context.Context) (bool, string) {
			gen, err := configGeneration(ctx)
			if err != nil {
				return false, err.Error()
			}
			if gen <= before {
				return false, fmt.Sprintf("unitlet-config still at generation %d", gen)
			}
			var state []string
			ok := true
			for _, svc := range slices.DeleteFunc(slices.Clone(e.m.services), func(s string) bool { return s == "config" }) {
				info, err := stack.ServiceInfo(ctx, podsyncNode, svc)
				if err != nil {
					return false, err.Error()
				}
				if info.GetPid() != pids[svc] {
					return false, fmt.Sprintf("unitlet-%s restarted (pid %d, was %d)", svc, info.GetPid(), pids[svc])
				}
				state = append(state, fmt.Sprintf("%s: %d (pending %d)", svc, info.GetConfigGeneration(), info.GetPendingConfigGeneration()))
				ok = ok && info.GetConfigGeneration() == gen && info.GetPendingConfigGeneration() == 0
			}
			return ok, fmt.Sprintf("config at %d; %s", gen, strings.Join(state, ", "))
		})
	}
	write := fmt.Sprintf("printf 'apiVersion: kubelet.config.k8s.io/v1beta1\\nkind: KubeletConfiguration\\nevictionMaxPodGracePeriod: %d\\n' > %s.tmp && chmod 0600 %s.tmp && mv %s.tmp %s",
		len(e.m.rows)+7, configDropIn, configDropIn, configDropIn, configDropIn)
	if out, err := stack.Exec(podsyncNode, []string{"sh", "-c", write}).CombinedOutput(); err != nil {
		return fmt.Errorf("write %s: %v: %s", configDropIn, err, out)
	}
	if err := followed("with the drop-in"); err != nil {
		return err
	}
	if out, err := stack.Exec(podsyncNode, []string{"rm", configDropIn}).CombinedOutput(); err != nil {
		return fmt.Errorf("remove %s: %v: %s", configDropIn, err, out)
	}
	return followed("without the drop-in")
}

// configGeneration is the generation unitlet-config serves, from GetReloadStatus as
// unitletctl reads it (its GetInfo reports none).
func configGeneration(ctx context.Context) (uint64, error) {
	conn, err := bus.Dial(stack.NodeSocketDir(podsyncNode), "config")
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	r, err := configv1.NewConfigServiceClient(conn).GetReloadStatus(ctx, &configv1.GetReloadStatusRequest{})
	if err != nil {
		return 0, fmt.Errorf("unitlet-config GetReloadStatus: %w", err)
	}
	return r.GetStatus().GetGeneration(), nil
}

// mixedPod has a configMap, a secret, a projected service-account token and an emptyDir
// volume, an init container and a readiness probe.
func mixedPod(name string) *corev1.Pod {
	p := busyboxPod(name, "echo main started; while true; do sleep 1; done")
	p.Spec.InitContainers = []corev1.Container{{
		Name: "init", Image: "unitlet.local/busybox:1", ImagePullPolicy: corev1.PullNever,
		Command:      []string{"sh", "-c", "echo init done; echo ready >/scratch/ready"},
		VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}},
	}}
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/scratch/ready"}}},
		PeriodSeconds: 1,
	}
	p.Spec.Volumes = []corev1.Volume{
		{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "mixed-cm"}}}},
		{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "mixed-secret"}}},
		{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: ptr.To[int64](3600), Path: "token"}},
		}}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "cm", MountPath: "/cm"}, {Name: "secret", MountPath: "/secret"}, {Name: "token", MountPath: "/token"}, {Name: "scratch", MountPath: "/scratch"},
	}
	return p
}

// podReady: the pod is created through the API server and is Running and Ready there, its
// init container done, as status writes what podsync reports.
func (e *mixedExercise) podReady() error {
	c := admin(e.t)
	created, err := c.CoreV1().Pods("default").Create(context.Background(), mixedPod(e.pod), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create pod %s: %w", e.pod, err)
	}
	e.uid = string(created.UID)
	e.t.Cleanup(func() {
		_ = c.CoreV1().Pods("default").Delete(context.Background(), e.pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	return poll(time.Minute, e.pod+" Running and Ready in the API, its init container done", func(ctx context.Context) (bool, string) {
		p, err := c.CoreV1().Pods("default").Get(ctx, e.pod, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		b, _ := json.Marshal(p.Status)
		init := len(p.Status.InitContainerStatuses) == 1 && p.Status.InitContainerStatuses[0].State.Terminated != nil &&
			p.Status.InitContainerStatuses[0].State.Terminated.ExitCode == 0
		return p.Status.Phase == corev1.PodRunning && conditionIs(p.Status, corev1.PodReady, corev1.ConditionTrue) && init, string(b)
	})
}

// logs: kubectl logs of both containers, through the node API.
func (e *mixedExercise) logs() error {
	for container, want := range map[string]string{"init": "init done", "main": "main started"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := kubectl(ctx, e.t, "logs", e.pod, "-c", container)
		cancel()
		if err != nil || !strings.Contains(out, want) {
			return fmt.Errorf("kubectl logs %s -c %s: %v: %q, want %q", e.pod, container, err, out, want)
		}
	}
	return nil
}

// exec: kubectl exec reads every volume back, through the node API and podsync's streaming
// URL.
func (e *mixedExercise) exec() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := kubectl(ctx, e.t, "exec", e.pod, "-c", "main", "--", "sh", "-c", "cat /cm/k /secret/k /scratch/ready; test -s /token/token && echo token")
	if want := "from-configmapfrom-secretready\ntoken"; err != nil || strings.TrimSpace(out) != want {
		return fmt.Errorf("kubectl exec: %v: %q, want %q", err, strings.TrimSpace(out), want)
	}
	return nil
}

// buildInfoSeries matches the series of unitlet_build_info in an exposition.
var buildInfoSeries = regexp.MustCompile(`unitlet_build_info\{[^}]*\}`)

// nodeAPI: /pods lists the pod, /metrics carries each service's build at its version
// (GetMetrics of each), /metrics/probes the pod's probe, /metrics/resource and
// /stats/summary answer, /healthz is ok; status logged no failed volume listing.
func (e *mixedExercise) nodeAPI() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	get := func(path string) (string, error) {
		code, body := nodeProxyGet(ctx, e.t, path)
		if code != http.StatusOK {
			return "", fmt.Errorf("GET %s: %d %s", path, code, body)
		}
		return body, nil
	}
	if err := poll(30*time.Second, "/pods lists "+e.pod, func(context.Context) (bool, string) {
		body, err := get("/pods")
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(body, `"`+e.pod+`"`), "not listed"
	}); err != nil {
		return err
	}
	if err := poll(30*time.Second, "/metrics: each service's unitlet_build_info at its version", func(context.Context) (bool, string) {
		body, err := get("/metrics")
		if err != nil {
			return false, err.Error()
		}
		seen := map[string]string{}
		for _, series := range buildInfoSeries.FindAllString(body, -1) {
			svc, version := labelValue(series, "service"), labelValue(series, "version")
			seen[svc] = version
		}
		for _, svc := range e.m.services {
			if seen[svc] != e.m.builds[e.m.running[svc]].Version {
				return false, fmt.Sprintf("unitlet_build_info versions %v", seen)
			}
		}
		return true, ""
	}); err != nil {
		return err
	}
	if err := poll(30*time.Second, "/metrics/probes: the pod's readiness probe", func(context.Context) (bool, string) {
		body, err := get("/metrics/probes")
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(body, `pod="`+e.pod+`"`), "no series of the pod"
	}); err != nil {
		return err
	}
	// status' ListVolumes crosses builds only when status or volumes is the odd one: then
	// wait for a summary collected since the pod started (it lists the pod), which asked
	// unitlet-volumes; the journal below says whether that failed. Elsewhere the summary
	// only has to answer (a collection is up to 10 s away).
	if e.odd == "status" || e.odd == "volumes" {
		if err := poll(30*time.Second, "/stats/summary lists "+e.pod, func(context.Context) (bool, string) {
			body, err := get("/stats/summary")
			if err != nil {
				return false, err.Error()
			}
			return strings.Contains(body, `"`+e.uid+`"`), "not listed"
		}); err != nil {
			return err
		}
	}
	for _, path := range []string{"/metrics/resource", "/stats/summary", "/healthz"} {
		if err := poll(30*time.Second, path+" answers", func(context.Context) (bool, string) {
			_, err := get(path)
			return err == nil, fmt.Sprint(err)
		}); err != nil {
			return err
		}
	}
	// From the second after the swaps: a summary collected while unitlet-volumes restarted
	// has no volume stats by design.
	since := fmt.Sprintf("@%d", e.began.Unix()+1)
	out, err := stack.Exec(podsyncNode, []string{"sh", "-c", "journalctl -u unitlet-status --since " + since + " --no-pager -o cat | grep 'no volume stats' || true"}).CombinedOutput()
	if err != nil {
		return fmt.Errorf("read unitlet-status' journal: %v: %s", err, out)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		return fmt.Errorf("unitlet-status could not list the volumes during the step:\n%s", s)
	}
	return nil
}

// labelValue is the value of label in one exposition series, `name{a="1",b="2"}`.
func labelValue(series, label string) string {
	_, labels, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
	for _, pair := range strings.Split(labels, ",") {
		if v, ok := strings.CutPrefix(pair, label+`="`); ok {
			return strings.TrimSuffix(v, `"`)
		}
	}
	return ""
}

// ctl: build's unitletctl, in node-1's machine, shows every service at the build it runs
// and the configuration, the bootstrap, the pods, the node and the certificates.
func (e *mixedExercise) ctl(build string) error {
	bin := e.m.ctl[build]
	run := func(args ...string) (string, error) {
		out, err := stack.Exec(podsyncNode, append([]string{bin}, args...)).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	out, err := run(append([]string{"-o", "json", "status"}, e.m.services...)...)
	if err != nil {
		return err
	}
	var rows []struct {
		Service string `json:"service"`
		Health  string `json:"health"`
		Version string `json:"version"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		return fmt.Errorf("%s status -o json: %v\n%s", bin, err, out)
	}
	for _, r := range rows {
		if want := e.m.builds[e.m.running[r.Service]].Version; r.Health != "SERVING" || r.Version != want {
			return fmt.Errorf("%s status: unitlet-%s %s at %s, want SERVING at %s", bin, r.Service, r.Health, r.Version, want)
		}
	}
	for _, args := range [][]string{{"config"}, {"config", "bootstrap"}, {"node"}, {"certs"}} {
		if _, err := run(args...); err != nil {
			return err
		}
	}
	if out, err := run("pods"); err != nil {
		return err
	} else if !strings.Contains(out, e.pod) {
		return fmt.Errorf("%s pods does not list %s:\n%s", bin, e.pod, out)
	}
	return nil
}

// rotatedSerial reads unitletctl certs rotate's last line.
var rotatedSerial = regexp.MustCompile(`rotated the serving certificate: serial (\d+)`)

// rotate: the unitletctl of the other build than certs' rotates the serving certificate,
// and the node API serves the new one.
func (e *mixedExercise) rotate() error {
	bin := e.m.ctl[other(e.m.running["certs"])]
	// Not its --wait: unitletctl's global flags refuse it ("unknown flag: --wait").
	out, err := stack.Exec(podsyncNode, []string{"timeout", "60", bin, "certs", "rotate", "serving"}).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s certs rotate serving: %v\n%s", bin, err, out)
	}
	m := rotatedSerial.FindStringSubmatch(string(out))
	if m == nil {
		return fmt.Errorf("%s certs rotate serving printed no new serial:\n%s", bin, out)
	}
	addr := strings.TrimPrefix(nodeAPI(e.t), "https://")
	return poll(15*time.Second, "the node API serves the rotated certificate "+m[1], func(context.Context) (bool, string) {
		got, err := servedCertificate(e.t, addr)
		if err != nil {
			return false, err.Error()
		}
		return got.SerialNumber.String() == m[1], "serial " + got.SerialNumber.String()
	})
}

// killDelete: ListPods (the callers' fallback) lists the pod; KillPod, as unitlet-eviction
// calls it, ends it Failed/Evicted in the API; deleted, it is gone from the API and its
// volumes are released on the host.
func (e *mixedExercise) killDelete() error {
	conn, err := bus.Dial(stack.NodeSocketDir(podsyncNode), "podsync")
	if err != nil {
		return err
	}
	defer conn.Close()
	client := podsyncv1.NewPodSyncServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := client.ListPods(ctx, &podsyncv1.ListPodsRequest{})
	if err != nil {
		return fmt.Errorf("ListPods: %w", err)
	}
	if !slices.ContainsFunc(list.GetPods(), func(p *podsyncv1.Pod) bool { return p.GetUid() == e.uid }) {
		return fmt.Errorf("ListPods does not list %s (%s)", e.pod, e.uid)
	}
	if _, err := client.KillPod(ctx, &podsyncv1.KillPodRequest{Uid: e.uid, Reason: "Evicted", Message: "mixed versions", GracePeriodSeconds: ptr.To[int64](1)}); err != nil {
		return fmt.Errorf("KillPod: %w", err)
	}
	c := admin(e.t)
	if err := poll(30*time.Second, e.pod+" Failed with reason Evicted in the API", func(ctx context.Context) (bool, string) {
		p, err := c.CoreV1().Pods("default").Get(ctx, e.pod, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted", fmt.Sprintf("%s %s", p.Status.Phase, p.Status.Reason)
	}); err != nil {
		return err
	}
	if err := c.CoreV1().Pods("default").Delete(context.Background(), e.pod, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete %s: %w", e.pod, err)
	}
	if err := poll(30*time.Second, e.pod+" gone from the API", func(ctx context.Context) (bool, string) {
		_, err := c.CoreV1().Pods("default").Get(ctx, e.pod, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	}); err != nil {
		return err
	}
	return poll(30*time.Second, e.pod+"'s volumes released", func(context.Context) (bool, string) {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return false, err.Error()
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, e.uid) {
				return false, line
			}
		}
		return true, ""
	})
}
