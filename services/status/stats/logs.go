package stats

import (
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/unitlet/unitlet/shared/usage"
)

// podLogsDir is the pod's log directory, <PodLogsDir>/<namespace>_<name>_<uid>.
func (p *Provider) podLogsDir(ref statsv1alpha1.PodReference) string {
	return filepath.Join(p.logsDir, ref.Namespace+"_"+ref.Name+"_"+ref.UID)
}

// addLogs sets each container's logs: what its log directory in the pod's uses, on the
// node's filesystem nodeFs. A container whose directory cannot be measured (not there yet)
// has no logs, as the kubelet leaves them out.
func (p *Provider) addLogs(ps *statsv1alpha1.PodStats, nodeFs *statsv1alpha1.FsStats, now time.Time) {
	dir := p.podLogsDir(ps.PodRef)
	for i := range ps.Containers {
		c := &ps.Containers[i]
		used, inodes, err := usage.Measure(filepath.Join(dir, c.Name))
		if err != nil {
			continue
		}
		c.Logs = onFs(nodeFs, now, uint64(used), uint64(inodes))
	}
}

// podFiles is what the pod uses on the node's filesystem beside its containers and
// volumes, as the kubelet counts it in the pod's ephemeral storage: the files directly in
// its log directory and its hosts file (<RootDir>/pods/<uid>/etc-hosts).
func (p *Provider) podFiles(ref statsv1alpha1.PodReference) (used, inodes uint64) {
	files := []string{filepath.Join(p.rootDir, "pods", ref.UID, "etc-hosts")}
	dir := p.podLogsDir(ref)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !e.IsDir() {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	for _, f := range files {
		var st unix.Stat_t
		if err := unix.Lstat(f, &st); err != nil {
			continue
		}
		used += uint64(st.Blocks) * 512
		inodes++
	}
	return used, inodes
}

// onFs is a usage on the filesystem fs: its size and free space with used and inodes.
func onFs(fs *statsv1alpha1.FsStats, now time.Time, used, inodes uint64) *statsv1alpha1.FsStats {
	s := &statsv1alpha1.FsStats{Time: metav1.NewTime(now), UsedBytes: &used, InodesUsed: &inodes}
	if fs != nil {
		s.AvailableBytes, s.CapacityBytes = copyPtr(fs.AvailableBytes), copyPtr(fs.CapacityBytes)
		s.Inodes, s.InodesFree = copyPtr(fs.Inodes), copyPtr(fs.InodesFree)
	}
	return s
}
