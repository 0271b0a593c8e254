package podworker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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
// stays (SweepPodDirs takes it when they are gone).
func (m *Manager) removePodFiles(w *worker) {
	w.mu.Lock()
	pod := w.pod
	w.mu.Unlock()
	if m.o.CRI.PodsDir == "" || pod.UID == "" {
		return
	}
	if err := removePodDir(filepath.Join(m.o.CRI.PodsDir, string(pod.UID))); err != nil {
		m.o.Log.Debug("pod directory kept", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

// removePodDir removes podsync's files in a pod's directory, the empty directories
// unitlet-volumes may leave, and then the directory itself, which fails while anything
// else (a volume not yet released) is left in it.
func removePodDir(dir string) error {
	var errs []error
	for _, name := range []string{etcHostsFile, "containers"} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, sub := range []string{"volumes", "volume-subpaths", "plugins"} {
		_ = os.Remove(filepath.Join(dir, sub))
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// SweepPodDirs removes the directories under podsDir of pods whose content may go
// (removable is asked after the directory is listed, so a pod that makes its directory
// after the listing is not in it), as the kubelet's housekeeping removes orphaned pod
// directories: a pod whose directory outlived its worker, because podsync was killed
// before it removed it or unitlet-volumes released the pod's volumes after. A directory
// that still holds anything but podsync's own files and empty volume directories stays.
// It returns the directories it removed.
func SweepPodDirs(podsDir string, removable func() func(types.UID) bool) ([]string, error) {
	entries, err := os.ReadDir(podsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the pod directories in %s: %w", podsDir, err)
	}
	may := removable()
	var removed []string
	for _, e := range entries {
		if !e.IsDir() || !may(types.UID(e.Name())) {
			continue
		}
		dir := filepath.Join(podsDir, e.Name())
		if removePodDir(dir) == nil {
			removed = append(removed, dir)
		}
	}
	return removed, nil
}
