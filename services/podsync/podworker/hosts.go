package podworker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/relist"
)

// etcHostsFile is the pod's hosts file in its directory, as the kubelet names it.
const etcHostsFile = "etc-hosts"

// containerConfig is criconfig.ContainerConfig with what the node adds: the services
// for the service-link variables, and the pod's hosts file among the mounts.
func (w *worker) containerConfig(ctx context.Context, pod *corev1.Pod, c *corev1.Container, rp *relist.Pod, restartCount int, podIPs []string, mounts []criconfig.Mount, pe criconfig.PodEnv) (*runtimeapi.ContainerConfig, string, error) {
	var err error
	if pe.Services, err = w.services(); err != nil {
		return nil, "", err
	}
	if mounts, err = w.withEtcHosts(pod, c, podIPs, mounts); err != nil {
		return nil, "", err
	}
	return w.criConfig(ctx, pod, c, rp, restartCount, mounts, pe)
}

// withEtcHosts writes the pod's hosts file, as the kubelet does before every container
// start, and adds its mount (read-write, as the kubelet's) to c's mounts when c gets it
// (criconfig.MountsEtcHosts). A pod on the pod network gets the managed file naming its
// IPs and hostname; one on the host network the node's file. Both end with the pod's
// hostAliases. Without a pods directory nothing is written.
func (w *worker) withEtcHosts(pod *corev1.Pod, c *corev1.Container, podIPs []string, mounts []criconfig.Mount) ([]criconfig.Mount, error) {
	if w.m.o.CRI.PodsDir == "" || !criconfig.MountsEtcHosts(pod, c, podIPs) {
		return mounts, nil
	}
	var content []byte
	if pod.Spec.HostNetwork {
		nodeFile := w.m.o.NodeHostsFile
		if nodeFile == "" {
			nodeFile = criconfig.EtcHostsPath
		}
		// The kubelet's waiting message is the bare error ("open /etc/hosts: no such
		// file or directory"), which names the file.
		node, err := os.ReadFile(nodeFile)
		if err != nil {
			return nil, err
		}
		content = criconfig.HostNetworkHostsFile(node, pod.Spec.HostAliases)
	} else {
		hostname, domain, err := criconfig.HostnameAndDomain(pod, w.m.o.CRI)
		if err != nil {
			return nil, err
		}
		content = criconfig.ManagedHostsFile(podIPs, hostname, domain, pod.Spec.HostAliases)
	}
	dir := filepath.Join(w.m.o.CRI.PodsDir, string(pod.UID))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("pod directory: %w", err)
	}
	// Written in place, not renamed over: running containers have this file bind-mounted.
	path := filepath.Join(dir, etcHostsFile)
	if err := os.WriteFile(path, content, 0o644); err != nil {
		return nil, fmt.Errorf("write the pod's hosts file: %w", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		return nil, fmt.Errorf("write the pod's hosts file: %w", err)
	}
	return append(slices.Clip(mounts), criconfig.Mount{ContainerPath: criconfig.EtcHostsPath, HostPath: path}), nil
}

// removePodFiles removes what podsync wrote in a forgotten pod's directory (its hosts
// file and termination-message files), then the directory itself if nothing else is
// left in it: volumes are unitlet-volumes' to remove, and a directory still holding any
// stays.
func (m *Manager) removePodFiles(w *worker) {
	w.mu.Lock()
	pod := w.pod
	w.mu.Unlock()
	if m.o.CRI.PodsDir == "" || pod.UID == "" {
		return
	}
	dir := filepath.Join(m.o.CRI.PodsDir, string(pod.UID))
	for _, name := range []string{etcHostsFile, "containers"} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			m.o.Log.Warn("remove the pod's files", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
	}
	// Empty directories unitlet-volumes may leave behind, then the pod's own.
	for _, sub := range []string{"volumes", "volume-subpaths", "plugins"} {
		_ = os.Remove(filepath.Join(dir, sub))
	}
	if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
		m.o.Log.Debug("pod directory kept", "pod", pod.Namespace+"/"+pod.Name, "dir", dir, "err", err)
	}
}
