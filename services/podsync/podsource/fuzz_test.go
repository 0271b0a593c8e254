package podsource

import (
	"strings"
	"testing"
)

// FuzzStaticPod feeds arbitrary manifests to StaticPod. Seeds are in
// testdata/fuzz/FuzzStaticPod. A pod it returns must be one podsync can run: valid again,
// named for the node, bound to it, with its UID as its hash, and the same UID next time.
func FuzzStaticPod(f *testing.F) {
	f.Add([]byte(validPodYAML))
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
		if !strings.HasSuffix(pod.Name, "-"+node) {
			t.Fatalf("name %q lacks the node suffix", pod.Name)
		}
		if pod.Spec.NodeName != node {
			t.Fatalf("spec.nodeName = %q, want %q", pod.Spec.NodeName, node)
		}
		if pod.UID == "" || pod.Annotations[AnnotationConfigHash] != string(pod.UID) {
			t.Fatalf("uid %q, config.hash %q: want equal and set", pod.UID, pod.Annotations[AnnotationConfigHash])
		}
		again, err := StaticPod(data, origin, node, SourceFile)
		if err != nil || again.UID != pod.UID {
			t.Fatalf("second decode: uid %v, err %v; want uid %s", again, err, pod.UID)
		}
	})
}
