package podworker

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
)

// allocation is the resources a pod was admitted with, per container and for the pod
// (the kubelet's allocated resources), and the resources each container's running
// instance was given (the kubelet's actuated resources). A resize (the API's resize
// subresource changing a running pod's resources) that fits the node is allocated at once
// and then actuated, container by container (resize.go); one that does not waits,
// Deferred. The allocation is checkpointed in <StateDir>/allocated/<uid>.json so that a
// restarted podsync keeps it and finishes a resize it was in the middle of.
type allocation struct {
	Containers map[string]corev1.ResourceRequirements `json:"containers"`
	Pod        *corev1.ResourceRequirements           `json:"pod,omitempty"`
	// Actuated are, by container name, the resources its running instance was created
	// with or last updated to.
	Actuated map[string]corev1.ResourceRequirements `json:"actuated,omitempty"`
	// ActuatedPod is the pod-level resources the pod's cgroup was last set to.
	ActuatedPod *corev1.ResourceRequirements `json:"actuatedPod,omitempty"`
}

// allocationOf is the resources pod asks for.
func allocationOf(pod *corev1.Pod) allocation {
	a := allocation{Containers: map[string]corev1.ResourceRequirements{}}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			a.Containers[c.Name] = *c.Resources.DeepCopy()
		}
	}
	a.Actuated = maps.Clone(a.Containers)
	if pod.Spec.Resources != nil {
		a.Pod = pod.Spec.Resources.DeepCopy()
		a.ActuatedPod = pod.Spec.Resources.DeepCopy()
	}
	return a
}

// differs reports whether pod asks for other resources than a allocates, and which: the
// resized containers' names ("pod" for pod-level resources).
func (a allocation) differs(pod *corev1.Pod) []string {
	var out []string
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if got, ok := a.Containers[c.Name]; ok && !apiequality.Semantic.DeepEqual(got, c.Resources) {
				out = append(out, c.Name)
			}
		}
	}
	if (a.Pod == nil) != (pod.Spec.Resources == nil) || a.Pod != nil && !apiequality.Semantic.DeepEqual(*a.Pod, *pod.Spec.Resources) {
		out = append(out, "pod")
	}
	return out
}

// apply is pod with a's resources in place of those it asks for; resized is
// a.differs(pod), pod itself returned when it is empty.
func (a allocation) apply(pod *corev1.Pod, resized []string) *corev1.Pod {
	if len(resized) == 0 {
		return pod
	}
	out := pod.DeepCopy()
	for _, cs := range [][]corev1.Container{out.Spec.InitContainers, out.Spec.Containers} {
		for i := range cs {
			if r, ok := a.Containers[cs[i].Name]; ok {
				cs[i].Resources = *r.DeepCopy()
			}
		}
	}
	out.Spec.Resources = a.Pod.DeepCopy()
	return out
}

func (m *Manager) allocationFile(pod *corev1.Pod) string {
	if m.o.StateDir == "" || pod.UID == "" {
		return ""
	}
	return filepath.Join(m.o.StateDir, "allocated", string(pod.UID)+".json")
}

// allocate is the pod's allocation: its checkpoint, else what this first version of the
// pod asks for, checkpointed.
func (m *Manager) allocate(pod *corev1.Pod) allocation {
	file := m.allocationFile(pod)
	if file == "" {
		return allocationOf(pod)
	}
	if b, err := os.ReadFile(file); err == nil {
		var a allocation
		if err := json.Unmarshal(b, &a); err == nil && a.Containers != nil {
			if a.Actuated == nil {
				// A checkpoint of an older podsync, which changed no container's resources.
				a.Actuated = maps.Clone(a.Containers)
			}
			if a.ActuatedPod == nil && a.Pod != nil {
				// Nor the pod's (pod-level resources are neither added nor removed by a resize).
				a.ActuatedPod = a.Pod.DeepCopy()
			}
			return a
		}
		m.o.Log.Warn("unreadable allocation checkpoint: the pod's current resources are taken as allocated", "file", file)
	}
	a := allocationOf(pod)
	if err := writeAllocation(file, a); err != nil {
		m.o.Log.Warn("checkpoint the pod's allocated resources", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
	return a
}

func writeAllocation(file string, a allocation) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// forgetAllocation removes a forgotten pod's allocation checkpoint.
func (m *Manager) forgetAllocation(pod *corev1.Pod) {
	if file := m.allocationFile(pod); file != "" {
		if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
			m.o.Log.Warn("remove the pod's allocation checkpoint", "file", file, "err", err)
		}
	}
}

// SweepAllocations removes the allocation and user namespace checkpoints in stateDir of
// pods whose content may go (a pod deleted while podsync was down leaves them behind).
func SweepAllocations(stateDir string, removable func() func(types.UID) bool) error {
	if stateDir == "" {
		return nil
	}
	var may func(types.UID) bool
	var errs []error
	for _, sub := range []string{"allocated", "userns"} {
		dir := filepath.Join(stateDir, sub)
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if may == nil {
			may = removable()
		}
		for _, e := range entries {
			uid, ok := strings.CutSuffix(e.Name(), ".json")
			if !ok || !may(types.UID(uid)) {
				continue
			}
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
