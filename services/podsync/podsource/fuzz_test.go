package podsource

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// FuzzStaticPod feeds arbitrary manifests to StaticPod. Seeds are in
// testdata/fuzz/FuzzStaticPod. A pod it returns must be one podsync can run: valid again,
// fully defaulted (what runs is what was validated), free of what the API refuses on a
// node's behalf (checked here by hand, apart from the validation library), named for the
// node, bound to it, with its UID as its hash, and the same UID next time.
func FuzzStaticPod(f *testing.F) {
	f.Add([]byte(validPodYAML))
	for _, c := range invalidStaticPods {
		f.Add([]byte(c.manifest))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const origin, node = "/etc/kubernetes/manifests/fuzz.yaml", "fuzz-node"
		pod, err := StaticPod(data, origin, node, SourceFile)
		if err != nil {
			if pod != nil {
				t.Fatalf("pod %q returned with error %v", pod.Name, err)
			}
			if !strings.Contains(err.Error(), origin) {
				t.Fatalf("error %q does not name the manifest", err)
			}
			return
		}
		if errs := validateStaticPod(pod); len(errs) > 0 {
			t.Fatalf("returned pod fails validation: %v", errs.ToAggregate())
		}
		again := pod.DeepCopy()
		applyAPIDefaults(again)
		if !equality.Semantic.DeepEqual(again, pod) {
			t.Fatalf("returned pod changes when defaulted again: it ran without some of the API's defaults")
		}
		if what := refusedOnANode(pod); what != "" {
			t.Fatalf("returned pod has %s", what)
		}
		if !strings.HasSuffix(pod.Name, "-"+node) {
			t.Fatalf("name %q lacks the node suffix", pod.Name)
		}
		if pod.Spec.NodeName != node {
			t.Fatalf("spec.nodeName = %q, want %q", pod.Spec.NodeName, node)
		}
		if pod.UID == "" || pod.Annotations[AnnotationConfigHash] != string(pod.UID) {
			t.Fatalf("uid %q, config.hash %q: want equal and set", pod.UID, pod.Annotations[AnnotationConfigHash])
		}
		second, err := StaticPod(data, origin, node, SourceFile)
		if err != nil || second.UID != pod.UID {
			t.Fatalf("second decode: uid %v, err %v; want uid %s", second, err, pod.UID)
		}
	})
}

// refusedOnANode names the first thing in pod the API server refuses that gives a
// container more of the node than its spec admits to, or "" when there is none. It is
// written from the API's documented rules, not with the validation library, so that the
// fuzzer checks the library is really reached on every path.
func refusedOnANode(pod *corev1.Pod) string {
	inUserNS := pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers
	profileEscapes := func(sp *corev1.SeccompProfile) bool {
		return sp != nil && sp.LocalhostProfile != nil && strings.Contains(*sp.LocalhostProfile, "..")
	}
	if sc := pod.Spec.SecurityContext; sc != nil && profileEscapes(sc.SeccompProfile) {
		return "a pod seccomp localhost profile with .."
	}
	var found string
	visit := func(c *corev1.Container) {
		privileged := c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
		for _, m := range c.VolumeMounts {
			if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional && !privileged {
				found = "Bidirectional mount propagation in unprivileged container " + c.Name
			}
			if strings.Contains(m.SubPath, "..") {
				found = "a subPath with .. in container " + c.Name
			}
		}
		if sc := c.SecurityContext; sc != nil {
			if sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount && !inUserNS {
				found = "procMount Unmasked with host users in container " + c.Name
			}
			if profileEscapes(sc.SeccompProfile) {
				found = "a seccomp localhost profile with .. in container " + c.Name
			}
		}
	}
	for i := range pod.Spec.InitContainers {
		visit(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		visit(&pod.Spec.Containers[i])
	}
	return found
}
