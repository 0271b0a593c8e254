package cis

import (
	"fmt"
	"path/filepath"
	"sort"
)

// The 4.1 checks: modes and owners of the node agent's files. "600 or more restrictive"
// means no permission beyond the owner's read and write; "root:root" means uid 0 and gid 0.

// restrictive reports whether f's permissions are 0600 or a subset of them.
func restrictive(f File) bool { return f.Mode.Perm()&^0o600 == 0 }

// rootOwned reports whether f belongs to root:root.
func rootOwned(f File) bool { return f.UID == 0 && f.GID == 0 }

// filesCheck checks that every one of paths exists and passes ok; want says what ok wants,
// none is the N/A reason when there are no paths. Files in optional may be missing.
func filesCheck(n *Node, paths, optional []string, want string, ok func(File) bool, none string) (Result, string, []string) {
	all := append(append([]string(nil), paths...), optional...)
	if len(all) == 0 {
		return NotApplicable, none, nil
	}
	isOptional := map[string]bool{}
	for _, p := range optional {
		isOptional[p] = true
	}
	var evidence, bad []string
	checked := 0
	for _, p := range all {
		f, found := n.Files[p]
		if !found {
			f = File{Path: p, Err: "not examined"}
		}
		evidence = append(evidence, f.String())
		switch {
		case f.Err != "":
			bad = append(bad, f.String())
		case !f.Exists && isOptional[p]:
		case !f.Exists:
			bad = append(bad, f.String())
		case !ok(f):
			bad = append(bad, f.String())
		default:
			checked++
		}
	}
	if len(bad) > 0 {
		return Fail, fmt.Sprintf("want %s: %s", want, joinOr(bad, "")), evidence
	}
	if checked == 0 {
		return NotApplicable, none, evidence
	}
	return Pass, fmt.Sprintf("%d file(s) %s", checked, want), evidence
}

// unitFiles are the files of unitlet.target and its units: unit files and drop-ins.
func unitFiles(n *Node) []string {
	var out []string
	for _, u := range n.Units {
		if u.FragmentPath != "" {
			out = append(out, u.FragmentPath)
		}
		out = append(out, u.DropIns...)
	}
	return out
}

const noUnits = "systemd has no unitlet.target loaded: unitlet does not run under systemd here"

func unitFilesMode(n *Node) (Result, string, []string) {
	if len(n.Units) == 0 {
		return Fail, noUnits, nil
	}
	return filesCheck(n, unitFiles(n), nil, "mode 0600 or stricter", restrictive, noUnits)
}

func unitFilesOwner(n *Node) (Result, string, []string) {
	if len(n.Units) == 0 {
		return Fail, noUnits, nil
	}
	return filesCheck(n, unitFiles(n), nil, "owner root:root", rootOwned, noUnits)
}

const noProxy = "no kube-proxy kubeconfig on the node (looked at the usual paths): unitlet runs no kube-proxy"

func proxyKubeconfigMode(n *Node) (Result, string, []string) {
	return filesCheck(n, n.ProxyKubeconfigs, nil, "mode 0600 or stricter", restrictive, noProxy)
}

func proxyKubeconfigOwner(n *Node) (Result, string, []string) {
	return filesCheck(n, n.ProxyKubeconfigs, nil, "owner root:root", rootOwned, noProxy)
}

// kubeconfigs are the required kubeconfig and the optional bootstrap kubeconfig (which an
// operator may remove once the node has joined).
func kubeconfigs(n *Node) (required, optional []string) {
	if n.Kubeconfig != "" {
		required = append(required, n.Kubeconfig)
	}
	if n.BootstrapKubeconfig != "" {
		optional = append(optional, n.BootstrapKubeconfig)
	}
	return required, optional
}

const noKubeconfig = "no --kubeconfig: a standalone node has no API credentials"

func kubeconfigMode(n *Node) (Result, string, []string) {
	req, opt := kubeconfigs(n)
	return filesCheck(n, req, opt, "mode 0600 or stricter", restrictive, noKubeconfig)
}

func kubeconfigOwner(n *Node) (Result, string, []string) {
	req, opt := kubeconfigs(n)
	return filesCheck(n, req, opt, "owner root:root", rootOwned, noKubeconfig)
}

// clientCA is authentication.x509.clientCAFile, when set.
func clientCA(n *Node) []string {
	if n.Config == nil || n.Config.Authentication.X509.ClientCAFile == "" {
		return nil
	}
	return []string{n.Config.Authentication.X509.ClientCAFile}
}

const noClientCA = "authentication.x509.clientCAFile is not set (4.2.3 fails)"

func clientCAMode(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	return filesCheck(n, clientCA(n), nil, "mode 0600 or stricter", restrictive, noClientCA)
}

func clientCAOwner(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	return filesCheck(n, clientCA(n), nil, "owner root:root", rootOwned, noClientCA)
}

const noConfigFile = "unitlet-config loads no --config file or drop-in: the configuration is the defaults and flags alone"

func configFilesMode(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	return filesCheck(n, n.ConfigFiles, nil, "mode 0600 or stricter", restrictive, noConfigFile)
}

func configFilesOwner(n *Node) (Result, string, []string) {
	if n.Config == nil {
		return Fail, noConfig, nil
	}
	return filesCheck(n, n.ConfigFiles, nil, "owner root:root", rootOwned, noConfigFile)
}

// keyFiles checks the node's certificates and keys: the cert dir's files, tlsCertFile and
// tlsPrivateKeyFile, and the files the kubeconfig names. CIS 1.1.20/1.1.21 ask the same of
// the control plane's PKI; the worker section has no such check, so this is unitlet's.
func keyFiles(n *Node) (Result, string, []string) {
	set := map[string]bool{}
	for _, p := range n.CertDirFiles {
		set[p] = true
	}
	for _, p := range n.KubeconfigFiles {
		set[p] = true
	}
	if n.Config != nil {
		for _, p := range []string{n.Config.TLSCertFile, n.Config.TLSPrivateKeyFile} {
			if p != "" {
				set[p] = true
			}
		}
	}
	var paths []string
	for p := range set {
		paths = append(paths, filepath.Clean(p))
	}
	sort.Strings(paths)
	both := func(f File) bool { return restrictive(f) && rootOwned(f) }
	return filesCheck(n, paths, nil, "mode 0600 or stricter and owner root:root", both, "no certificate or key files: the cert dir is empty and none is configured")
}
