package cis

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
)

// The 4.2 checks: the kubelet's settings, read from the KubeletConfiguration unitlet-config
// serves (defaults applied, flags and drop-ins merged: what every service runs with), the
// running unitlet-config's command line and environment, and the node API as a client
// sees it.

const noConfig = "unitlet-config did not answer: the configuration in effect is unknown"

// strongSuites are the TLS cipher suites the benchmark's 4.2.12 accepts.
var strongSuites = []string{
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
	"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
	"TLS_RSA_WITH_AES_256_GCM_SHA384",
	"TLS_RSA_WITH_AES_128_GCM_SHA256",
}

// strongSuite reports whether name is in strongSuites; Go's names for the ChaCha20 suites
// may carry a _SHA256 suffix.
func strongSuite(name string) bool {
	return slices.Contains(strongSuites, strings.TrimSuffix(name, "_SHA256")) || slices.Contains(strongSuites, name)
}

// nodeAPIEvidence is what the client of the node API saw.
func nodeAPIEvidence(a NodeAPI) string {
	if a.Err != "" {
		return fmt.Sprintf("node API %s: %s", a.Address, a.Err)
	}
	return fmt.Sprintf("node API %s: GET /pods without credentials: %d %s; serving certificate %q issued by %q", a.Address, a.AnonymousStatus, http.StatusText(a.AnonymousStatus), a.CertSubject, a.CertIssuer)
}

func anonymousAuth(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	on := n.Config.Authentication.Anonymous.Enabled
	ev := []string{fmt.Sprintf("authentication.anonymous.enabled: %s", boolPtr(on)), nodeAPIEvidence(n.NodeAPI)}
	if on == nil || *on {
		return Fail, "authentication.anonymous.enabled is not false", ev
	}
	if a := n.NodeAPI; a.Err == "" && a.AnonymousStatus != http.StatusUnauthorized && a.AnonymousStatus != http.StatusForbidden {
		return Fail, fmt.Sprintf("the node API answered GET /pods without credentials with %d, not 401", a.AnonymousStatus), ev
	}
	if n.NodeAPI.Err != "" {
		return Pass, "authentication.anonymous.enabled: false (the node API could not be asked)", ev
	}
	return Pass, "authentication.anonymous.enabled: false, and the node API refuses a request without credentials (401)", ev
}

func authorizationMode(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	mode := string(n.Config.Authorization.Mode)
	ev := []string{"authorization.mode: " + mode}
	if mode == "" || mode == "AlwaysAllow" {
		return Fail, fmt.Sprintf("authorization.mode is %q", mode), ev
	}
	return Pass, "authorization.mode: " + mode, ev
}

func clientCAFile(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	p := n.Config.Authentication.X509.ClientCAFile
	if p == "" {
		return Fail, "authentication.x509.clientCAFile is not set: no client certificate can authenticate to the node API", nil
	}
	f := n.Files[p]
	ev := []string{"authentication.x509.clientCAFile: " + p, f.String()}
	if !f.Exists {
		return Fail, "authentication.x509.clientCAFile names a file that is not there: " + p, ev
	}
	return Pass, "authentication.x509.clientCAFile: " + p, ev
}

// readOnlyPort checks the kubelet's setting and what the setting is for: that no port of
// the node agent serves a page without credentials. Every TCP socket of every running
// unit of unitlet.target is asked for the protected pages; only /healthz may answer (the
// kubelet's healthz port), every other page must be refused (401, 403) or not there (404).
func readOnlyPort(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	ev := []string{fmt.Sprintf("readOnlyPort: %d", n.Config.ReadOnlyPort)}
	if n.Config.ReadOnlyPort != 0 {
		return Fail, fmt.Sprintf("readOnlyPort is %d", n.Config.ReadOnlyPort), ev
	}
	if len(n.Units) == 0 {
		return Fail, "readOnlyPort: 0, but " + noUnits + ": the ports its services listen on are unknown", ev
	}
	var bad []string
	for _, l := range n.Listeners {
		who := fmt.Sprintf("%s (pid %d)", l.Unit, l.PID)
		if l.Address != "" {
			who += " on " + l.Address
		}
		if l.Probe.Err != "" {
			ev = append(ev, who+": "+l.Probe.Err)
			bad = append(bad, who+" could not be asked")
			continue
		}
		var served, refused []string
		for _, path := range protectedPages {
			code, asked := l.Probe.Status[path]
			switch {
			case !asked:
				served = append(served, path+" not asked")
			case code == http.StatusNotFound || code == http.StatusUnauthorized || code == http.StatusForbidden:
				refused = append(refused, fmt.Sprintf("%s %d", path, code))
			default:
				served = append(served, fmt.Sprintf("%s %d", path, code))
			}
		}
		ev = append(ev, fmt.Sprintf("%s, %s://%s without credentials: served %s; refused %s", who, l.Probe.Scheme, l.Probe.Address, joinOr(served, "none"), joinOr(refused, "none")))
		if len(served) > 0 {
			bad = append(bad, fmt.Sprintf("%s serves %s without credentials", who, strings.Join(served, ", ")))
		}
	}
	if len(bad) > 0 {
		return Fail, "readOnlyPort: 0, but " + strings.Join(bad, "; "), ev
	}
	return Pass, fmt.Sprintf("readOnlyPort: 0 (unitlet refuses any other value), and none of the %d TCP listeners of unitlet's services serves a page but /healthz without credentials", len(n.Listeners)), ev
}

func streamingIdleTimeout(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	d := n.Config.StreamingConnectionIdleTimeout.Duration
	ev := []string{"streamingConnectionIdleTimeout: " + d.String()}
	if d <= 0 {
		return Fail, "streamingConnectionIdleTimeout is " + d.String(), ev
	}
	return Pass, "streamingConnectionIdleTimeout: " + d.String(), ev
}

func iptablesUtilChains(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	ev := []string{"makeIPTablesUtilChains: " + boolPtr(n.Config.MakeIPTablesUtilChains)}
	return NotApplicable, "unitlet makes no iptables chains: makeIPTablesUtilChains is not supported (true, the default, and false load; unitlet makes none either way), and nothing on the node depends on the kubelet's KUBE-* utility chains", ev
}

// hostnameOverrideFlag is the flag 4.2.7 is about, as unitlet-config's flag and variable.
const (
	hostnameOverrideFlag = "--hostname-override"
	hostnameOverrideEnv  = "UNITLET_HOSTNAME_OVERRIDE"
)

func hostnameOverride(n *Node) (Result, string, []string) {
	p := n.ConfigProcess
	if p.From == "" {
		return Fail, "unitlet-config's command line could not be read", nil
	}
	ev := []string{fmt.Sprintf("unitlet-config (%s): %s", p.From, strings.Join(p.Args, " "))}
	var set []string
	for _, a := range p.Args {
		if a == hostnameOverrideFlag || strings.HasPrefix(a, hostnameOverrideFlag+"=") {
			set = append(set, a)
		}
	}
	for _, e := range p.Env {
		if k, v, _ := strings.Cut(e, "="); k == hostnameOverrideEnv && v != "" {
			set = append(set, e)
		}
	}
	ev = append(ev, fmt.Sprintf("node name %q, hostname %q", n.Name, n.Hostname))
	if len(set) > 0 {
		return Fail, "the node name is overridden: " + strings.Join(set, ", "), ev
	}
	return Pass, fmt.Sprintf("neither %s nor %s is set: the node is named by its hostname", hostnameOverrideFlag, hostnameOverrideEnv), ev
}

func eventRecordQPS(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	if n.Config.EventRecordQPS == nil {
		return Pass, "eventRecordQPS is not set: the kubelet's default (50)", []string{"eventRecordQPS: (not set)"}
	}
	qps := *n.Config.EventRecordQPS
	ev := []string{fmt.Sprintf("eventRecordQPS: %d, eventBurst: %d", qps, n.Config.EventBurst)}
	if qps < 0 {
		return Fail, fmt.Sprintf("eventRecordQPS is %d", qps), ev
	}
	if qps == 0 {
		return Pass, "eventRecordQPS: 0 (no limit: every event is recorded)", ev
	}
	return Pass, fmt.Sprintf("eventRecordQPS: %d, burst %d, applied to the event clients of podsync and status", qps, n.Config.EventBurst), ev
}

func tlsCertAndKey(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	c := n.Config
	ev := []string{fmt.Sprintf("tlsCertFile: %q, tlsPrivateKeyFile: %q, serverTLSBootstrap: %t", c.TLSCertFile, c.TLSPrivateKeyFile, c.ServerTLSBootstrap), nodeAPIEvidence(n.NodeAPI)}
	switch {
	case c.TLSCertFile != "" || c.TLSPrivateKeyFile != "":
		var bad []string
		for _, p := range []string{c.TLSCertFile, c.TLSPrivateKeyFile} {
			if f := n.Files[p]; p == "" || !f.Exists {
				bad = append(bad, fmt.Sprintf("%q is not there", p))
			}
		}
		if len(bad) > 0 {
			return Fail, "tlsCertFile and tlsPrivateKeyFile must both name files: " + strings.Join(bad, ", "), ev
		}
		return Pass, "the node API serves tlsCertFile with tlsPrivateKeyFile", ev
	case !c.ServerTLSBootstrap:
		return Fail, "neither tlsCertFile/tlsPrivateKeyFile nor serverTLSBootstrap is set: the node API serves a self-signed certificate", ev
	case n.NodeAPI.Err != "":
		return Fail, "serverTLSBootstrap is set but the node API's certificate could not be read", ev
	case n.NodeAPI.SelfSigned:
		return Fail, "serverTLSBootstrap is set but the node API still serves a self-signed certificate (its serving CSR not approved yet?)", ev
	}
	return Pass, fmt.Sprintf("serverTLSBootstrap: the node API serves %q, issued by %q", n.NodeAPI.CertSubject, n.NodeAPI.CertIssuer), ev
}

// unitActive reports whether the named unit is loaded and active, and says how it is.
func unitActive(n *Node, name string) (bool, string) {
	for _, u := range n.Units {
		if u.Name == name {
			return u.ActiveState == "active", fmt.Sprintf("%s: %s", name, u.ActiveState)
		}
	}
	return false, name + ": not installed"
}

const standalone = "no --kubeconfig: a standalone node has no API server to issue certificates"

func rotateCertificates(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	if n.Kubeconfig == "" {
		return NotApplicable, standalone, nil
	}
	certs, state := unitActive(n, "unitlet-certs.service")
	ev := []string{"rotateCertificates: " + fmt.Sprint(n.Config.RotateCertificates), state}
	if !n.Config.RotateCertificates {
		return Fail, "rotateCertificates is false", ev
	}
	if !certs {
		return Fail, "rotateCertificates is true but unitlet-certs, which rotates the client certificate, is not running (" + state + ")", ev
	}
	return Pass, "rotateCertificates: true, and unitlet-certs is active", ev
}

func rotateServerCertificate(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	c := n.Config
	certs, state := unitActive(n, "unitlet-certs.service")
	ev := []string{fmt.Sprintf("serverTLSBootstrap: %t, tlsCertFile: %q", c.ServerTLSBootstrap, c.TLSCertFile), state}
	if v, ok := c.FeatureGates["RotateKubeletServerCertificate"]; ok {
		ev = append(ev, fmt.Sprintf("featureGates.RotateKubeletServerCertificate: %t (unitlet applies no feature gate: serverTLSBootstrap decides)", v))
	}
	switch {
	case c.TLSCertFile != "":
		return NotApplicable, "the serving certificate is tlsCertFile, from outside the cluster: whoever issues it rotates it (the benchmark's exception for certificates from an outside authority)", ev
	case n.Kubeconfig == "":
		return NotApplicable, standalone, ev
	case !c.ServerTLSBootstrap:
		return Fail, "serverTLSBootstrap is false: the node API's certificate is self-signed and never rotated", ev
	case !certs:
		return Fail, "serverTLSBootstrap is true but unitlet-certs, which requests and rotates the serving certificate, is not running (" + state + ")", ev
	}
	return Pass, "serverTLSBootstrap: true, and unitlet-certs (active) requests and rotates the serving certificate", ev
}

func strongCiphers(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	configured := n.Config.TLSCipherSuites
	minVersion := n.Config.TLSMinVersion
	if minVersion == "" {
		minVersion = "(not set: TLS 1.2)"
	}
	ev := []string{"tlsCipherSuites: " + joinOr(configured, "(not set)"), "tlsMinVersion: " + minVersion}
	var weak []string
	for _, s := range configured {
		if !strongSuite(s) {
			weak = append(weak, s)
		}
	}
	a := n.NodeAPI
	if a.Err != "" {
		ev = append(ev, nodeAPIEvidence(a))
	} else {
		ev = append(ev, fmt.Sprintf("node API %s: of %d TLS 1.2 suites outside the list, accepted: %s", a.Address, len(a.SuitesProbed), joinOr(a.WeakSuitesAccepted, "none")))
	}
	switch {
	case len(weak) > 0:
		return Fail, "tlsCipherSuites holds suites outside the benchmark's list: " + strings.Join(weak, ", "), ev
	case len(a.WeakSuitesAccepted) > 0:
		return Fail, "the node API accepts suites outside the benchmark's list: " + strings.Join(a.WeakSuitesAccepted, ", "), ev
	case a.Err != "" && len(configured) == 0:
		return Fail, "tlsCipherSuites is not set and the node API could not be asked which suites it accepts", ev
	case a.Err != "":
		return Pass, "every suite of tlsCipherSuites is in the benchmark's list (the node API could not be asked)", ev
	case len(configured) == 0:
		return Pass, fmt.Sprintf("tlsCipherSuites is not set, and the node API accepts none of the %d TLS 1.2 suites outside the benchmark's list", len(a.SuitesProbed)), ev
	}
	return Pass, fmt.Sprintf("every suite of tlsCipherSuites is in the benchmark's list, and the node API accepts none of the %d outside it", len(a.SuitesProbed)), ev
}

func podPidsLimit(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	if n.Config.PodPidsLimit == nil || *n.Config.PodPidsLimit <= 0 {
		v := "(not set)"
		if n.Config.PodPidsLimit != nil {
			v = fmt.Sprint(*n.Config.PodPidsLimit)
		}
		return Fail, "podPidsLimit is not set: one pod may take every process ID of the node; set podPidsLimit (e.g. 4096)", []string{"podPidsLimit: " + v}
	}
	limit := *n.Config.PodPidsLimit
	return Pass, fmt.Sprintf("podPidsLimit: %d, each pod cgroup's pids limit (podsync)", limit), []string{fmt.Sprintf("podPidsLimit: %d", limit)}
}

// kernelDefaults are the tunables the kubelet's protectKernelDefaults compares, with the
// values it wants.
var kernelDefaults = map[string]string{
	"vm.overcommit_memory":      "1",
	"vm.panic_on_oom":           "0",
	"kernel.panic":              "10",
	"kernel.panic_on_oops":      "1",
	"kernel.keys.root_maxkeys":  "1000000",
	"kernel.keys.root_maxbytes": "25000000",
}

func protectKernelDefaults(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	var ev, differ []string
	ev = append(ev, fmt.Sprintf("protectKernelDefaults: %t", n.Config.ProtectKernelDefaults))
	keys := make([]string, 0, len(kernelDefaults))
	for k := range kernelDefaults {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		got := n.Sysctls[k]
		ev = append(ev, fmt.Sprintf("%s = %s (the kubelet wants %s)", k, joinOr([]string{got}, "?"), kernelDefaults[k]))
		if got != kernelDefaults[k] {
			differ = append(differ, k)
		}
	}
	switch {
	case n.Config.ProtectKernelDefaults && len(differ) > 0:
		// unitlet-config refuses such a configuration, so this means it serves an older one.
		return Fail, "protectKernelDefaults is true but the kernel's tunables differ: " + strings.Join(differ, ", "), ev
	case n.Config.ProtectKernelDefaults:
		return Pass, "protectKernelDefaults: true, and the kernel's tunables are the kubelet's", ev
	case n.Container != "":
		return NotApplicable, fmt.Sprintf("the node is a %s container: its kernel and tunables are the host's, which it cannot set (protectKernelDefaults would refuse to start while the host's differ: %s)", n.Container, joinOr(differ, "none")), ev
	}
	return Fail, "protectKernelDefaults is false", ev
}

func boolPtr(b *bool) string {
	if b == nil {
		return "(not set)"
	}
	return fmt.Sprint(*b)
}
