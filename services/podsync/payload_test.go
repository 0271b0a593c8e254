package podsync

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/unitlet/unitlet/shared/payload"
)

// TestPublishedPodsNameTheirSchemas: every pod podsync publishes names the schema of its
// object and of its status.
func TestPublishedPodsNameTheirSchemas(t *testing.T) {
	f := newServiceFixture(t, 0)
	p := newPod("elsewhere", 1)
	p.Spec.NodeName = "node2" // rejected: its Failed status is published at once
	f.s.SetPods("file", []*corev1.Pod{p})
	pods, _ := f.s.List()
	if len(pods) == 0 {
		t.Fatal("no pods published")
	}
	for _, bp := range pods {
		if bp.GetPodSchema() != payload.SchemaPod || len(bp.GetStatus()) == 0 || bp.GetStatusSchema() != payload.SchemaPodStatus {
			t.Errorf("pod %s: pod_schema %q, status %s in %q; want %q and a status in %q",
				bp.GetName(), bp.GetPodSchema(), bp.GetStatus(), bp.GetStatusSchema(), payload.SchemaPod, payload.SchemaPodStatus)
		}
	}
}

func TestPrepareRequestNamesThePodSchema(t *testing.T) {
	req, err := prepareRequest(newPod("web", 1), "main")
	if err != nil {
		t.Fatal(err)
	}
	if req.GetPodSchema() != payload.SchemaPod || req.GetContainer() != "main" || len(req.GetPod()) == 0 {
		t.Errorf("request: pod_schema %q, container %q, %d bytes of pod; want %q, main, the pod", req.GetPodSchema(), req.GetContainer(), len(req.GetPod()), payload.SchemaPod)
	}
}
