package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// StateRoot holds every stack's directory: $UNITLET_HARNESS_DIR, else
// /var/tmp/unitlet-harness.
func StateRoot() string {
	if d := os.Getenv("UNITLET_HARNESS_DIR"); d != "" {
		return d
	}
	return "/var/tmp/unitlet-harness"
}

// Harness drives one stack.
type Harness struct {
	stack *Stack
	repo  string
	out   io.Writer
	paths paths
	bins  *Binaries

	// held are the components KillComponent stopped on purpose: KeepRuntime leaves them
	// down until StartComponent.
	heldMu sync.Mutex
	held   map[string]bool
}

// New returns the harness of the stack in stackFile; repo is the unitlet checkout, whose
// binaries it builds. Progress goes to out.
func New(stackFile, repo string, out io.Writer) (*Harness, error) {
	s, err := LoadStack(stackFile)
	if err != nil {
		return nil, err
	}
	return &Harness{stack: s, repo: repo, out: out, paths: newPaths(filepath.Join(StateRoot(), s.Name))}, nil
}

// Stack is the harness's stack.
func (h *Harness) Stack() *Stack { return h.stack }

// Repo is the root of the repository the harness builds from.
func (h *Harness) Repo() string { return h.repo }

// Dir is the stack's data directory.
func (h *Harness) Dir() string { return h.paths.root }

// APIServerURL is the API server's address.
func (h *Harness) APIServerURL() string {
	return fmt.Sprintf("https://127.0.0.1:%d", h.stack.ControlPlane.APIServerPort)
}

// AdminKubeconfig is the path of the cluster-admin kubeconfig.
func (h *Harness) AdminKubeconfig() string {
	return filepath.Join(h.paths.kubeconfigs, "admin.kubeconfig")
}

// BootstrapKubeconfig is the path of the kubeconfig with the bootstrap token.
func (h *Harness) BootstrapKubeconfig() string {
	return filepath.Join(h.paths.kubeconfigs, "bootstrap.kubeconfig")
}

// RESTConfig loads a kubeconfig.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

// AdminClient is a client-go clientset with cluster-admin rights.
func (h *Harness) AdminClient() (kubernetes.Interface, error) {
	cfg, err := RESTConfig(h.AdminKubeconfig())
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// state is what `up` started, kept in <dir>/state.json for `down` and `status`.
type state struct {
	Procs map[string]*proc `json:"procs"`
}

func (h *Harness) stateFile() string { return filepath.Join(h.paths.root, "state.json") }

func (h *Harness) loadState() *state {
	st := &state{Procs: map[string]*proc{}}
	if b, err := os.ReadFile(h.stateFile()); err == nil {
		_ = json.Unmarshal(b, st)
	}
	if st.Procs == nil {
		st.Procs = map[string]*proc{}
	}
	return st
}

func (h *Harness) saveState(st *state) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := h.stateFile() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, h.stateFile())
}

// step prints what is happening and how long it took.
func (h *Harness) step(what string, fn func() (string, error)) error {
	start := time.Now()
	note, err := fn()
	d := time.Since(start).Round(100 * time.Millisecond)
	if err != nil {
		fmt.Fprintf(h.out, "[%6s] %s: FAILED: %v\n", d, what, err)
		return fmt.Errorf("%s: %w", what, err)
	}
	fmt.Fprintf(h.out, "[%6s] %s%s\n", d, what, note)
	return nil
}

// Up brings the stack up. Parts already running and healthy are left alone, so Up can run
// again at any time.
func (h *Harness) Up(ctx context.Context) error {
	total := time.Now()
	if err := h.removeStale(); err != nil {
		return err
	}
	if !h.stack.Standalone {
		if err := h.step("binaries", func() (string, error) {
			b, err := EnsureBinaries(h.repo, h.out)
			h.bins = b
			return "", err
		}); err != nil {
			return err
		}
	}
	var files *controlPlaneFiles
	if err := h.step("PKI and kubeconfigs", func() (string, error) {
		f, err := h.makePKI()
		files = f
		return " in " + h.paths.pki, err
	}); err != nil {
		return err
	}
	st := h.loadState()
	if !h.stack.Standalone {
		for _, c := range h.controlPlane(files) {
			if err := h.ensure(ctx, st, c); err != nil {
				return err
			}
		}
	}
	if h.stack.Runtime.Kind == "containerd" {
		if err := h.ensure(ctx, st, h.containerd()); err != nil {
			return err
		}
		if err := h.step("test images", func() (string, error) { return h.importImages(ctx) }); err != nil {
			return err
		}
		if h.stack.Registry != nil {
			if err := h.ensure(ctx, st, h.registry()); err != nil {
				return err
			}
			if err := h.step("registry images", func() (string, error) { return h.pushRegistryImages(ctx) }); err != nil {
				return err
			}
		}
	}
	if !h.stack.Standalone {
		client, err := h.AdminClient()
		if err != nil {
			return err
		}
		if err := h.step("TLS bootstrapping (token, RBAC, auto-approval)", func() (string, error) {
			return "", h.setUpBootstrap(ctx, client)
		}); err != nil {
			return err
		}
	}
	if len(h.stack.Nodes) > 0 {
		if err := h.step("unitlet binaries", func() (string, error) { return "", h.buildUnitlet() }); err != nil {
			return err
		}
	}
	if !h.stack.Standalone && slices.ContainsFunc(h.stack.Nodes, func(n Node) bool { return n.ServerTLSBootstrap }) {
		if err := h.ensure(ctx, st, h.approver()); err != nil {
			return err
		}
	}
	if h.hasBackend("nspawn") {
		if err := h.step("nspawn machine tree", h.ensureNspawnTree); err != nil {
			return err
		}
	}
	if slices.ContainsFunc(h.stack.Nodes, func(n Node) bool { return n.Kubeadm }) {
		if err := h.step("kubeadm", func() (string, error) {
			bin, err := EnsureKubeadm(h.repo, h.out)
			return " " + bin, err
		}); err != nil {
			return err
		}
	}
	if h.hasBackend("vm") {
		if err := h.step("vm tree", h.ensureVMTree); err != nil {
			return err
		}
		for _, n := range h.stack.Nodes {
			if n.Backend == "vm" {
				if err := h.step(n.Name+": vm disk image", func() (string, error) {
					img, err := h.ensureVMImage(n)
					return " " + img, err
				}); err != nil {
					return err
				}
			}
		}
	}
	for _, n := range h.stack.Nodes {
		for _, c := range h.nodeComponents(n, files) {
			if err := h.ensure(ctx, st, c); err != nil {
				return err
			}
		}
	}
	if err := h.vmBootTimes(ctx); err != nil {
		return err
	}
	if h.stack.MetricsServer != nil {
		if err := h.step("metrics API objects (RBAC, Service, APIService)", func() (string, error) { return h.applyMetricsAPI(ctx) }); err != nil {
			return err
		}
		if err := h.ensure(ctx, st, h.metricsServer(ctx)); err != nil {
			return err
		}
		if err := h.step("metrics API available (v1beta1.metrics.k8s.io)", func() (string, error) { return h.waitMetricsAPI(ctx) }); err != nil {
			return err
		}
	}
	if h.stack.LocalPathProvisioner != nil {
		if err := h.step("local-path provisioning objects (namespace, configuration, StorageClass local-path)", func() (string, error) { return h.applyLocalPath(ctx) }); err != nil {
			return err
		}
		if err := h.ensure(ctx, st, h.localPathProvisioner()); err != nil {
			return err
		}
	}
	if h.stack.Standalone {
		fmt.Fprintf(h.out, "stack %s (standalone: no API server) is up in %s\n", h.stack.Name, time.Since(total).Round(100*time.Millisecond))
		return nil
	}
	fmt.Fprintf(h.out, "stack %s is up in %s\n  kubectl --kubeconfig=%s get nodes\n", h.stack.Name, time.Since(total).Round(100*time.Millisecond), h.AdminKubeconfig())
	return nil
}

// removeStale takes down what an earlier stack left in this stack's directory when none
// of its processes runs any more (a run that was killed, a machine that rebooted): its
// etcd would hand this stack the old run's pods, and its nodes' directories their volumes.
// A stack with any process alive is a running one, which Up joins.
func (h *Harness) removeStale() error {
	if _, err := os.Stat(h.paths.root); err != nil {
		return nil
	}
	for _, p := range h.loadState().Procs {
		if p.alive() && p.sameCommand() {
			return nil
		}
	}
	fmt.Fprintf(h.out, "[      ] %s holds an earlier stack and none of its processes runs: removing it first\n", h.paths.root)
	if err := h.Down(); err != nil {
		return fmt.Errorf("remove the earlier stack in %s: %w", h.paths.root, err)
	}
	return nil
}

// ensure starts c unless it already runs and is ready, then waits until it is.
func (h *Harness) ensure(ctx context.Context, st *state, c component) error {
	if p := st.Procs[c.name]; p.alive() {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := c.ready(rctx)
		cancel()
		if err == nil {
			fmt.Fprintf(h.out, "[%6s] %s already running (pid %d)\n", "", c.name, p.PID)
			return nil
		}
		_ = p.stop(10 * time.Second)
	}
	return h.step(c.name+" ready", func() (string, error) {
		p, err := c.start()
		if err != nil {
			return "", err
		}
		st.Procs[c.name] = p
		if err := h.saveState(st); err != nil {
			return "", err
		}
		within := c.within
		if within == 0 {
			within = 2 * time.Minute
		}
		wctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		var last error
		for {
			if !p.alive() {
				return "", fmt.Errorf("it exited; the end of its log (%s):\n%s", p.Log, tail(p.Log, 15))
			}
			if last = c.ready(wctx); last == nil {
				return fmt.Sprintf(" (pid %d)", p.PID), nil
			}
			select {
			case <-wctx.Done():
				return "", fmt.Errorf("not ready in time: %v; the end of its log (%s):\n%s", last, p.Log, tail(p.Log, 15))
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
}

// Leftovers lists what of the stack still exists: processes recorded in st, shims of its
// containerd, mounts and files under its directory. Empty after a complete Down.
func (h *Harness) Leftovers(st *state) []string {
	var out []string
	for n, p := range st.Procs {
		if p.alive() {
			out = append(out, fmt.Sprintf("process %s (pid %d)", n, p.PID))
		}
	}
	if pids := h.shimPIDs(); len(pids) > 0 {
		out = append(out, fmt.Sprintf("containerd shims %v", pids))
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(b), " "+h.paths.root) {
		out = append(out, "mounts under "+h.paths.root)
	}
	if _, err := os.Stat(h.paths.root); err == nil {
		out = append(out, "directory "+h.paths.root)
	}
	return out
}

// approver runs `unitlet-harness approve-csrs`: the approver of nodes' serving CSRs that
// a cluster with serverTLSBootstrap needs (ApproveServingCSRs).
func (h *Harness) approver() component {
	return component{
		name: "csr-approver",
		start: func() (*proc, error) {
			return startProcess(h.paths.logs, "csr-approver", nil, filepath.Join(h.binDir(), "unitlet-harness"),
				"approve-csrs", "--kubeconfig", h.AdminKubeconfig())
		},
		ready: func(context.Context) error { return nil },
	}
}

// Down stops everything the stack started and removes its directory.
func (h *Harness) Down() error {
	st := h.loadState()
	names := make([]string, 0, len(st.Procs))
	for n := range st.Procs {
		names = append(names, n)
	}
	// Nodes first, then the control plane from the top.
	order := map[string]int{"containerd": 1, "kube-scheduler": 2, "kube-controller-manager": 3, "kube-apiserver": 4, "etcd": 5}
	sort.Slice(names, func(i, j int) bool { return order[names[i]] < order[names[j]] })
	var errs []error
	podsRemoved := false
	for _, n := range names {
		p := st.Procs[n]
		if order[n] > 0 && !podsRemoved {
			// The nodes are stopped (their podsync would race the removal); the runtime runs.
			podsRemoved = true
			if p := st.Procs["containerd"]; p.alive() {
				if err := h.removeAllPods(context.Background()); err != nil {
					fmt.Fprintf(h.out, "could not remove the pods through CRI (%v); killing their shims\n", err)
				}
			}
		}
		if p.alive() && !p.sameCommand() {
			fmt.Fprintf(h.out, "%s (pid %d) is gone; the PID now runs another program, left alone\n", n, p.PID)
			continue
		}
		if err := p.stop(15 * time.Second); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(h.out, "stopped %s (pid %d)\n", n, p.PID)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	h.killShims()
	h.flushNeighbours()
	if err := h.unmountUnder(h.paths.root); err != nil {
		return err
	}
	if err := os.RemoveAll(h.paths.root); err != nil {
		return err
	}
	fmt.Fprintf(h.out, "removed %s\n", h.paths.root)
	return nil
}

// ComponentStatus is one line of Status.
type ComponentStatus struct {
	Name  string `json:"name"`
	PID   int    `json:"pid"`
	Alive bool   `json:"alive"`
	Log   string `json:"log"`
}

// Status lists the stack's processes.
func (h *Harness) Status() []ComponentStatus {
	st := h.loadState()
	var out []ComponentStatus
	for n, p := range st.Procs {
		out = append(out, ComponentStatus{Name: n, PID: p.PID, Alive: p.alive(), Log: p.Log})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// PrintStatus writes Status as a table.
func (h *Harness) PrintStatus(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tPID\tSTATE\tLOG")
	for _, c := range h.Status() {
		state := "running"
		if !c.Alive {
			state = "not running"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", c.Name, c.PID, state, c.Log)
	}
	tw.Flush()
}

// Logs returns the logs of the named components (all when none), last lines each.
func (h *Harness) Logs(lines int, names ...string) string {
	st := h.loadState()
	if len(names) == 0 {
		for n := range st.Procs {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	var b strings.Builder
	for _, n := range names {
		p, ok := st.Procs[n]
		if !ok {
			fmt.Fprintf(&b, "==> %s: no such component\n", n)
			continue
		}
		fmt.Fprintf(&b, "==> %s (%s) <==\n%s\n", n, p.Log, tail(p.Log, lines))
	}
	return b.String()
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// unitletBinaries are the binaries a stack runs, built from this checkout.
var unitletBinaries = []string{"unitlet-config", "unitlet-certs", "unitlet-podsync", "unitlet-status", "unitlet-volumes", "unitlet-eviction", "unitletctl", "unitlet-harness"}

// buildUnitlet puts the unitlet binaries of this checkout into the stack's bin dir: copied
// from UNITLET_BIN_DIR when it is set (what `make build` made: `make run` and `make test`
// set it, so nothing is compiled twice), else built with the flags `make build` uses, so
// the two share the Go build cache.
func (h *Harness) buildUnitlet() error {
	if dir := os.Getenv("UNITLET_BIN_DIR"); dir != "" {
		if err := os.MkdirAll(h.binDir(), 0o755); err != nil {
			return err
		}
		for _, b := range unitletBinaries {
			if err := copyExecutable(filepath.Join(dir, b), filepath.Join(h.binDir(), b)); err != nil {
				return fmt.Errorf("UNITLET_BIN_DIR=%s: %w (run `make build`, or unset UNITLET_BIN_DIR to build here)", dir, err)
			}
		}
		return nil
	}
	// Stripped and stamped with the checkout's version as `make build` does, so unitletctl
	// status shows it.
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", h.repo}, args...)...).Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	ldflags := "-s -w"
	if v := git("describe", "--tags", "--always", "--dirty"); v != "" {
		ldflags += " -X github.com/unitlet/unitlet/shared/version.Version=" + v +
			" -X github.com/unitlet/unitlet/shared/version.GitCommit=" + git("rev-parse", "HEAD")
	}
	args := []string{"build", "-trimpath", "-ldflags", ldflags, "-o", h.binDir() + "/"}
	for _, b := range unitletBinaries {
		args = append(args, "./cmd/"+b)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = h.repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v\n%s", err, out)
	}
	return nil
}

// copyExecutable copies the executable from to to, replacing to through a rename so that
// a running copy is not written over.
func copyExecutable(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := to + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, to)
}

func (h *Harness) binDir() string { return filepath.Join(h.paths.root, "bin") }
