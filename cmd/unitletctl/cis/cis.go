// Package cis checks a unitlet node against the worker-node section (4.1 and 4.2) of the
// CIS Kubernetes Benchmark v1.10, reading what the node runs: the units systemd has loaded
// and their files, the configuration unitlet-config serves, the command line and
// environment of the running unitlet-config, the files on disk with their owner and mode,
// the node API as a client sees it, and every TCP port the running units listen on, asked
// without credentials. Nothing is taken from unitlet's defaults in code.
//
// The benchmark is written for the kubelet. Each recommendation is mapped to unitlet's
// equivalent (the units of unitlet.target for "the kubelet service file", the --config
// file and its drop-ins for "config.yaml", ...); the title says what is checked. A check
// that cannot apply to the node says N/A and why, never PASS.
//
// Collect gathers a Node; Run evaluates every check on it. The checks are pure functions
// of the Node, so tests feed them bad settings and modes.
package cis

import (
	"fmt"
	"io"
	"io/fs"
	"strings"
	"text/tabwriter"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Benchmark names the benchmark and section the checks follow.
const Benchmark = "CIS Kubernetes Benchmark v1.10.0, section 4 (Worker Nodes)"

// Result is a check's verdict.
type Result string

const (
	Pass Result = "PASS"
	Fail Result = "FAIL"
	// NotApplicable: the recommendation cannot apply to this node; the reason says why.
	NotApplicable Result = "N/A"
)

// Finding is the outcome of one check.
type Finding struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Result Result `json:"result"`
	// Reason is one line: why the check gave Result.
	Reason string `json:"reason"`
	// Evidence is what the check read: files with mode and owner, settings with their values.
	Evidence []string `json:"evidence,omitempty"`
}

// Report is every finding on one node.
type Report struct {
	Benchmark string    `json:"benchmark"`
	Node      string    `json:"node"`
	Findings  []Finding `json:"findings"`
	// Problems are what could not be read while collecting; the checks that needed it fail
	// or say so.
	Problems []string `json:"problems,omitempty"`
}

// Failed is the number of findings that failed.
func (r *Report) Failed() int {
	n := 0
	for _, f := range r.Findings {
		if f.Result == Fail {
			n++
		}
	}
	return n
}

// Node is what the checks read, as the node runs it.
type Node struct {
	// Name and Hostname are the node's identity from unitlet-config.
	Name, Hostname string
	// Config is the KubeletConfiguration in effect, from unitlet-config; nil when it did
	// not answer.
	Config *kubeletconfigv1beta1.KubeletConfiguration
	// ConfigFiles are the --config file and the drop-ins the configuration was loaded from.
	ConfigFiles []string
	// Kubeconfig and BootstrapKubeconfig are unitlet-config's --kubeconfig and
	// --bootstrap-kubeconfig ("" when not set); CertDir its --cert-dir.
	Kubeconfig, BootstrapKubeconfig, CertDir string
	// KubeconfigFiles are the files the kubeconfig names (CA, client certificate and key).
	KubeconfigFiles []string
	// CertDirFiles are the regular files in CertDir.
	CertDirFiles []string
	// Units are unitlet.target and the units that are part of it (PartOf=unitlet.target).
	Units []Unit
	// ConfigProcess is unitlet-config's command line and environment.
	ConfigProcess Process
	// ProxyKubeconfigs are the kube-proxy kubeconfigs found at the usual paths.
	ProxyKubeconfigs []string
	// Files are the files above, as stat in the node sees them, by path.
	Files map[string]File
	// Container is the container technology the node runs in (systemd-detect-virt
	// --container), "" on a machine with its own kernel.
	Container string
	// Sysctls are the kernel tunables protectKernelDefaults is about, as the kernel has them.
	Sysctls map[string]string
	// NodeAPI is the node API (:10250) as a client on the node sees it.
	NodeAPI NodeAPI
	// Listeners are the TCP sockets the running units' main processes listen on, each asked
	// for the pages a client without credentials must not get.
	Listeners []Listener
}

// Listener is a TCP socket a unit's main process listens on.
type Listener struct {
	Unit string
	PID  int
	// Address is the socket's local address as bound ("" when the process's sockets could
	// not be read: Probe.Err says why).
	Address string
	// Probe is what a client on the node without credentials got from it.
	Probe HTTPProbe
}

// HTTPProbe is what GET of each of a set of pages without credentials answered.
type HTTPProbe struct {
	// Address is what was dialled; Scheme is "https" when the listener spoke TLS, else "http".
	Address, Scheme string
	// Err is why the pages could not all be asked.
	Err string
	// Status is the HTTP status of each page, by path.
	Status map[string]int
}

// Unit is a systemd unit as systemd has it loaded.
type Unit struct {
	Name         string
	FragmentPath string
	DropIns      []string
	ActiveState  string
	MainPID      int
}

// Process is a command line and environment.
type Process struct {
	// From says where they were read: "/proc/<pid>", or the unit's ExecStart= and
	// Environment= when the service was not running.
	From string
	Args []string
	Env  []string
}

// File is a file as stat in the node sees it (following symbolic links).
type File struct {
	Path   string
	Exists bool
	Mode   fs.FileMode
	UID    uint32
	GID    uint32
	// User and Group are the owner's names, or the numbers when the node has no name.
	User, Group string
	// Err is why stat failed, other than the file not existing.
	Err string
}

func (f File) String() string {
	switch {
	case f.Err != "":
		return fmt.Sprintf("%s: %s", f.Path, f.Err)
	case !f.Exists:
		return f.Path + ": does not exist"
	}
	return fmt.Sprintf("%s %04o %s:%s", f.Path, f.Mode.Perm(), f.User, f.Group)
}

// NodeAPI is what a client of the node API found.
type NodeAPI struct {
	// Address is what was dialled.
	Address string
	// Err is why the node API could not be reached; the other fields are then empty.
	Err string
	// AnonymousStatus is the HTTP status of GET /pods without credentials.
	AnonymousStatus int
	// CertSubject and CertIssuer name the serving certificate; SelfSigned is true when it
	// is its own issuer.
	CertSubject, CertIssuer string
	SelfSigned              bool
	// SuitesProbed are the TLS 1.2 cipher suites outside the benchmark's list that were
	// offered one at a time; WeakSuitesAccepted those the node API accepted.
	SuitesProbed       []string
	WeakSuitesAccepted []string
}

// check is one recommendation: its ID and title in the benchmark, and its evaluation.
type check struct {
	id, title string
	eval      func(n *Node) (Result, string, []string)
}

// Run evaluates every check on n.
func Run(n *Node) []Finding {
	var out []Finding
	for _, c := range checks() {
		res, reason, evidence := c.eval(n)
		out = append(out, Finding{ID: c.id, Title: c.title, Result: res, Reason: reason, Evidence: evidence})
	}
	return out
}

// checks are the worker-node recommendations, in the benchmark's order, and unitlet's
// additions (IDs with a letter) after the section they belong to.
func checks() []check {
	return []check{
		{"4.1.1", "Ensure that the kubelet service file permissions are set to 600 or more restrictive (unitlet.target and every unit and drop-in of it)", unitFilesMode},
		{"4.1.2", "Ensure that the kubelet service file ownership is set to root:root (unitlet.target and every unit and drop-in of it)", unitFilesOwner},
		{"4.1.3", "If proxy kubeconfig file exists ensure permissions are set to 600 or more restrictive", proxyKubeconfigMode},
		{"4.1.4", "If proxy kubeconfig file exists ensure ownership is set to root:root", proxyKubeconfigOwner},
		{"4.1.5", "Ensure that the --kubeconfig kubelet.conf file permissions are set to 600 or more restrictive (unitlet-config's --kubeconfig and --bootstrap-kubeconfig)", kubeconfigMode},
		{"4.1.6", "Ensure that the --kubeconfig kubelet.conf file ownership is set to root:root (unitlet-config's --kubeconfig and --bootstrap-kubeconfig)", kubeconfigOwner},
		{"4.1.7", "Ensure that the certificate authorities file permissions are set to 600 or more restrictive (authentication.x509.clientCAFile)", clientCAMode},
		{"4.1.8", "Ensure that the client certificate authorities file ownership is set to root:root (authentication.x509.clientCAFile)", clientCAOwner},
		{"4.1.9", "If the kubelet config.yaml configuration file is being used validate permissions set to 600 or more restrictive (unitlet-config's --config and its drop-ins)", configFilesMode},
		{"4.1.10", "If the kubelet config.yaml configuration file is being used validate file ownership is set to root:root (unitlet-config's --config and its drop-ins)", configFilesOwner},
		{"4.1.U1", "unitlet: Ensure that the node's certificates and keys (--cert-dir, tlsCertFile, tlsPrivateKeyFile, the kubeconfig's) are 600 or more restrictive and owned by root:root", keyFiles},
		{"4.2.1", "Ensure that the --anonymous-auth argument is set to false", anonymousAuth},
		{"4.2.2", "Ensure that the --authorization-mode argument is not set to AlwaysAllow", authorizationMode},
		{"4.2.3", "Ensure that the --client-ca-file argument is set as appropriate", clientCAFile},
		{"4.2.4", "Verify that the --read-only-port argument is set to 0 (and that no TCP port of unitlet's services serves a page but /healthz without credentials)", readOnlyPort},
		{"4.2.5", "Ensure that the --streaming-connection-idle-timeout argument is not set to 0", streamingIdleTimeout},
		{"4.2.6", "Ensure that the --make-iptables-util-chains argument is set to true", iptablesUtilChains},
		{"4.2.7", "Ensure that the --hostname-override argument is not set", hostnameOverride},
		{"4.2.8", "Ensure that the eventRecordQPS argument is set to a level which ensures appropriate event capture", eventRecordQPS},
		{"4.2.9", "Ensure that the --tls-cert-file and --tls-private-key-file arguments are set as appropriate", tlsCertAndKey},
		{"4.2.10", "Ensure that the --rotate-certificates argument is not set to false", rotateCertificates},
		{"4.2.11", "Verify that the RotateKubeletServerCertificate argument is set to true", rotateServerCertificate},
		{"4.2.12", "Ensure that the Kubelet only makes use of Strong Cryptographic Ciphers", strongCiphers},
		{"4.2.13", "Ensure that a limit is set on pod PIDs", podPidsLimit},
		{"4.2.K1", "Ensure that the --protect-kernel-defaults argument is set to true (4.2.6 of CIS v1.8 and earlier)", protectKernelDefaults},
	}
}

// WriteTable writes r as a table: each check's ID, result and title, then its reason.
func WriteTable(w io.Writer, r *Report) error {
	fmt.Fprintf(w, "%s, node %s\n", r.Benchmark, r.Node)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRESULT\tCHECK")
	counts := map[Result]int{}
	for _, f := range r.Findings {
		counts[f.Result]++
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.ID, f.Result, f.Title)
		fmt.Fprintf(tw, "\t\t  %s\n", f.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	_, err := fmt.Fprintf(w, "%d checks: %d PASS, %d FAIL, %d N/A\n", len(r.Findings), counts[Pass], counts[Fail], counts[NotApplicable])
	return err
}

// joinOr is items joined by ", ", or none when there are none.
func joinOr(items []string, none string) string {
	if len(items) == 0 {
		return none
	}
	return strings.Join(items, ", ")
}
