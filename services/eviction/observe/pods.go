package observe

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/shared/cgroupfile"
	"github.com/unitlet/unitlet/shared/usage"
)

// The labels the kubelet (and podsync) puts on every container.
const (
	labelPodUID        = "io.kubernetes.pod.uid"
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelContainerName = "io.kubernetes.container.name"
)

// The volume plugins whose directories count as the pod's local ephemeral storage, as the
// kubelet's IsLocalEphemeralVolume has them (emptyDir, configMap, gitRepo); secret,
// downwardAPI and projected volumes do not count.
var ephemeralVolumePlugins = []string{"kubernetes.io~empty-dir", "kubernetes.io~configmap", "kubernetes.io~git-repo"}

// Container is what one running container uses.
type Container struct {
	Name string
	// Memory is the working set in bytes, as the runtime reports it.
	Memory int64
	// Rootfs is the writable layer's bytes, on the container file system.
	Rootfs int64
	// Logs is the bytes of the files in the container's log directory, on nodefs.
	Logs int64
	// RootfsInodes and LogsInodes are the inodes of the same.
	RootfsInodes, LogsInodes int64
}

// Pod is what one pod with running containers uses.
type Pod struct {
	UID             types.UID
	Namespace, Name string
	// Memory is the pod cgroup's working set in bytes (the sum of the containers' when the
	// pod cgroup was not found).
	Memory int64
	// Containers are the running ones, by name.
	Containers []Container
	// Volumes is the bytes used by each local ephemeral volume on disk, by volume name:
	// emptyDirs of the default medium, configMaps, gitRepos. These are the volumes the
	// kubelet adds to a pod's ephemeral storage and to its disk ranking.
	Volumes map[string]int64
	// Processes is the tasks in the pod cgroup (pids.current), the pod's share of
	// pid.available.
	Processes int64

	// MemoryVolumes is the bytes used by each emptyDir mounted on a file system of its own
	// (medium Memory: a tmpfs), by volume name. The kubelet checks them against the
	// emptyDir's sizeLimit but counts them neither in ephemeral storage nor on a disk.
	MemoryVolumes map[string]int64
	// VolumeInodes is the inodes of each volume in Volumes and MemoryVolumes.
	VolumeInodes map[string]int64
	// EtcHosts is the bytes of the pod's hosts file (<RootDir>/pods/<uid>/etc-hosts) and
	// PodLogs those of the files directly in the pod's log directory: both count in the
	// pod's ephemeral storage.
	EtcHosts, PodLogs int64
	// Err is what could not be measured, joined; what could is given all the same.
	Err error
}

// EphemeralStorage is the pod's ephemeral storage usage in bytes as the kubelet sums it
// against the pod's ephemeral-storage limit: every container's writable layer and logs, the
// local ephemeral volumes, the hosts file and the pod's own log files.
func (p Pod) EphemeralStorage() int64 {
	n := p.EtcHosts + p.PodLogs
	for _, c := range p.Containers {
		n += c.Rootfs + c.Logs
	}
	for _, v := range p.Volumes {
		n += v
	}
	return n
}

// Pods measures every pod that has a running container, by UID. Only a failing runtime
// call is an error; what cannot be measured of one pod is in its Err.
func (s *Source) Pods(ctx context.Context) (map[types.UID]Pod, error) {
	listed, err := s.o.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	running := map[string]*runtimeapi.Container{}
	for _, c := range listed.GetContainers() {
		if c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			running[c.GetId()] = c
		}
	}
	stats, err := s.o.Runtime.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{}})
	if err != nil {
		return nil, fmt.Errorf("list container stats: %w", err)
	}

	pods := map[types.UID]*Pod{}
	for _, st := range stats.GetStats() {
		c, ok := running[st.GetAttributes().GetId()]
		if !ok {
			continue
		}
		labels := c.GetLabels()
		if labels[labelPodUID] == "" {
			labels = st.GetAttributes().GetLabels()
		}
		uid := types.UID(labels[labelPodUID])
		if uid == "" {
			continue // not a pod's container
		}
		p := pods[uid]
		if p == nil {
			p = &Pod{UID: uid, Namespace: labels[labelPodNamespace], Name: labels[labelPodName]}
			pods[uid] = p
		}
		name := labels[labelContainerName]
		if name == "" {
			name = cmp.Or(c.GetMetadata().GetName(), st.GetAttributes().GetMetadata().GetName())
		}
		p.Containers = append(p.Containers, Container{
			Name:         name,
			Memory:       int64(st.GetMemory().GetWorkingSetBytes().GetValue()),
			Rootfs:       int64(st.GetWritableLayer().GetUsedBytes().GetValue()),
			RootfsInodes: int64(st.GetWritableLayer().GetInodesUsed().GetValue()),
		})
	}

	cgroups, cgroupsErr := s.podCgroups()
	s.forgetVolumes(pods)
	s.refreshVolumes(slices.Collect(maps.Keys(pods)), time.Now())
	out := make(map[types.UID]Pod, len(pods))
	for uid, p := range pods {
		slices.SortFunc(p.Containers, func(a, b Container) int { return cmp.Compare(a.Name, b.Name) })
		var errs []error
		errs = append(errs, s.podLogs(p)...)
		errs = append(errs, s.podVolumes(p)...)
		errs = append(errs, s.podCgroup(p, cgroups, cgroupsErr)...)
		p.Err = errors.Join(errs...)
		out[uid] = *p
	}
	return out, nil
}

// podLogs measures the pod's log directory, <PodLogsDir>/<namespace>_<name>_<uid>: each
// container's files in its own directory, and the files directly in it.
func (s *Source) podLogs(p *Pod) []error {
	var errs []error
	dir := filepath.Join(s.o.PodLogsDir, p.Namespace+"_"+p.Name+"_"+string(p.UID))
	for i := range p.Containers {
		c := &p.Containers[i]
		var err error
		if c.Logs, c.LogsInodes, err = filesUsage(filepath.Join(dir, c.Name)); err != nil {
			errs = append(errs, fmt.Errorf("container %s logs: %w", c.Name, err))
		}
	}
	var err error
	if p.PodLogs, _, err = filesUsage(dir); err != nil {
		errs = append(errs, fmt.Errorf("pod logs: %w", err))
	}
	return errs
}

// volumeUsage is what a pod's volumes use, measured by one walk that ended at at.
type volumeUsage struct {
	at                     time.Time
	volumes, memory, inode map[string]int64
	errs                   []error
}

const (
	// volumeWait is how long Pods waits for the walks of pods' volumes under way (see
	// refreshVolumes).
	volumeWait = 2 * time.Second
	// maxWalks is how many pods' volumes are walked at once: a slow walk does not hold up
	// the other pods' measurements, and the walks' memory stays bounded (each walk at most
	// some 13 MiB, usually far less; usage.Measure) within the unit's MemoryMax=.
	maxWalks = 4
)

// refreshVolumes starts a walk of the volumes of each pod in uids whose last measurement is
// older than VolumeStatsPeriod (unless one is under way), and waits at most volumeWait for
// those walks. As the kubelet's volume stat calculators, the walks run in the background,
// here maxWalks at a time, and the caller takes the latest measurement: a volume that takes
// long to walk (a million entries, on a slow disk) delays no round of the eviction loop
// by more than volumeWait, its pod being judged on its previous measurement meanwhile.
func (s *Source) refreshVolumes(uids []types.UID, now time.Time) {
	var pending []chan struct{}
	s.mu.Lock()
	for _, uid := range uids {
		if c, ok := s.volumes[uid]; ok && s.o.VolumeStatsPeriod > 0 && now.Sub(c.at) < s.o.VolumeStatsPeriod {
			continue
		}
		done, busy := s.inflight[uid]
		if !busy {
			done = make(chan struct{})
			s.inflight[uid] = done
			go s.walkVolumes(uid, done)
		}
		pending = append(pending, done)
	}
	s.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	t := time.NewTimer(s.volumeWait)
	defer t.Stop()
	for _, done := range pending {
		select {
		case <-done:
		case <-t.C:
			return
		}
	}
}

// walkVolumes measures a pod's volumes when fewer than maxWalks other walks run, keeps the
// measurement as of the walk's end, and closes done. The next walk of the pod's volumes
// thus starts VolumeStatsPeriod after this one ended, as the kubelet's calculators wait a
// full period after each calculation: a walk that takes as long as the period does not
// turn into one walk after another.
func (s *Source) walkVolumes(uid types.UID, done chan struct{}) {
	s.walks <- struct{}{}
	u := s.measure(uid)
	<-s.walks
	u.at = time.Now()
	s.mu.Lock()
	s.volumes[uid] = u
	delete(s.inflight, uid)
	s.mu.Unlock()
	close(done)
}

// podVolumes gives the pod its volumes' latest measurement (refreshVolumes) and measures
// its hosts file, under <RootDir>/pods/<uid>.
func (s *Source) podVolumes(p *Pod) []error {
	s.mu.Lock()
	u, ok := s.volumes[p.UID]
	s.mu.Unlock()
	var errs []error
	if ok {
		p.Volumes, p.MemoryVolumes, p.VolumeInodes = maps.Clone(u.volumes), maps.Clone(u.memory), maps.Clone(u.inode)
		errs = slices.Clone(u.errs)
	} else {
		errs = append(errs, fmt.Errorf("volumes: not measured yet (the first walk of them has taken more than %s so far)", s.volumeWait))
	}

	hosts := filepath.Join(s.podsDir(), string(p.UID), "etc-hosts")
	if _, err := os.Lstat(hosts); err == nil {
		if p.EtcHosts, _, err = diskUsage(hosts); err != nil {
			errs = append(errs, fmt.Errorf("hosts file: %w", err))
		}
	}
	return errs
}

// forgetVolumes drops the volume measurements of pods not in keep.
func (s *Source) forgetVolumes(keep map[types.UID]*Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid := range s.volumes {
		if _, ok := keep[uid]; !ok {
			delete(s.volumes, uid)
		}
	}
}

// measureVolumes walks the pod's volume directories of the ephemeral plugins. An emptyDir
// that is a mount point of its own (a tmpfs) goes to memory.
func (s *Source) measureVolumes(uid types.UID) volumeUsage {
	var u volumeUsage
	add := func(m *map[string]int64, name string, n int64) {
		if *m == nil {
			*m = map[string]int64{}
		}
		(*m)[name] = n
	}
	for _, plugin := range ephemeralVolumePlugins {
		pluginDir := filepath.Join(s.podsDir(), string(uid), "volumes", plugin)
		entries, err := os.ReadDir(pluginDir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			u.errs = append(u.errs, fmt.Errorf("volumes: %w", err))
			continue
		}
		var parent unix.Stat_t
		if err := unix.Stat(pluginDir, &parent); err != nil {
			u.errs = append(u.errs, fmt.Errorf("volumes: stat %s: %w", pluginDir, err))
			continue
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			dir := filepath.Join(pluginDir, e.Name())
			var st unix.Stat_t
			if err := unix.Stat(dir, &st); err != nil {
				if !errors.Is(err, unix.ENOENT) {
					u.errs = append(u.errs, fmt.Errorf("volume %s: stat %s: %w", e.Name(), dir, err))
				}
				continue
			}
			used, inodes, err := diskUsage(dir)
			if err != nil {
				u.errs = append(u.errs, fmt.Errorf("volume %s: %w", e.Name(), err))
				if !errors.Is(err, usage.ErrTooDeep) {
					continue
				}
				// What lies above the depth walked is used all the same: a lower bound
				// counts against the pod, where dropping the volume would count nothing.
			}
			add(&u.inode, e.Name(), inodes)
			if plugin == ephemeralVolumePlugins[0] && st.Dev != parent.Dev {
				add(&u.memory, e.Name(), used)
			} else {
				add(&u.volumes, e.Name(), used)
			}
		}
	}
	return u
}

// podCgroup reads the pod cgroup's working set and task count. Without the cgroup the
// pod's memory is its containers' sum and its task count unknown (0).
func (s *Source) podCgroup(p *Pod, cgroups map[types.UID]string, cgroupsErr error) []error {
	rel, found := cgroups[p.UID]
	if !found {
		for _, c := range p.Containers {
			p.Memory += c.Memory
		}
		if cgroupsErr != nil {
			return []error{cgroupsErr}
		}
		return []error{fmt.Errorf("no pod cgroup for pod %s below %s", p.UID, filepath.Join(s.h.memory, s.kubepods))}
	}
	var errs []error
	use, err := s.h.readMemory(filepath.Join(s.h.memory, rel), false)
	if err != nil {
		errs = append(errs, fmt.Errorf("pod cgroup memory: %w", err))
		for _, c := range p.Containers {
			p.Memory += c.Memory
		}
	} else {
		p.Memory = use.workingSet
	}
	if s.h.pids == "" {
		return append(errs, errors.New("pod cgroup tasks: no cgroup v1 pids hierarchy"))
	}
	if p.Processes, err = cgroupfile.Read[int64](filepath.Join(s.h.pids, rel, "pids.current")); err != nil {
		errs = append(errs, fmt.Errorf("pod cgroup tasks: %w", err))
	}
	return errs
}
