package vmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Under systemd on cgroup v2, /stats/summary's system containers are the node agent's own
// units (kubelet), containerd's (runtime) and kubepods.slice (pods), each with its own
// figures: on the harness's nspawn node the runtime is out of sight and the services share
// the machine's cgroup, so only here are the three proven.
func TestStatsSummarySystemContainersUnderSystemd(t *testing.T) {
	vmNode(t)
	var summary statsv1alpha1.Summary
	stack.WaitFor(t, 2*time.Minute, "/stats/summary with the kubelet, runtime and pods system containers", func(ctx context.Context) (bool, string) {
		code, body, err := guestNodeAPIGet(ctx, t, "/stats/summary")
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("%d %v: %.300s", code, err, body)
		}
		summary = statsv1alpha1.Summary{}
		if err := json.Unmarshal([]byte(body), &summary); err != nil {
			return false, err.Error()
		}
		return len(summary.Node.SystemContainers) == 3, fmt.Sprintf("%+v", summary.Node.SystemContainers)
	})
	byName := map[string]statsv1alpha1.ContainerStats{}
	for _, c := range summary.Node.SystemContainers {
		byName[c.Name] = c
	}
	node := *summary.Node.Memory.WorkingSetBytes
	for _, name := range []string{statsv1alpha1.SystemContainerKubelet, statsv1alpha1.SystemContainerRuntime, statsv1alpha1.SystemContainerPods} {
		c, ok := byName[name]
		if !ok {
			t.Errorf("no %q system container: %+v", name, summary.Node.SystemContainers)
			continue
		}
		if c.Memory == nil || c.Memory.WorkingSetBytes == nil || *c.Memory.WorkingSetBytes == 0 || c.CPU == nil || c.CPU.UsageCoreNanoSeconds == nil {
			t.Errorf("%s: no CPU or memory figures: %+v", name, c)
			continue
		}
		ws := *c.Memory.WorkingSetBytes
		t.Logf("%s: working set %.1f MiB, CPU %.1f s, since %s", name, float64(ws)/(1<<20), float64(*c.CPU.UsageCoreNanoSeconds)/1e9, c.StartTime.Format(time.RFC3339))
		// Each is a part of the node, not the node (as on a machine whose services share
		// one cgroup).
		if ws >= node {
			t.Errorf("%s: working set %d, not less than the node's %d", name, ws, node)
		}
	}
}
