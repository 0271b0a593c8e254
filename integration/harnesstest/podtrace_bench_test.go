package harnesstest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/daemon"
)

// Where a unitlet pod's start time goes, from the services' own histograms read over the
// bus before and after a round: podsync's steps of each new pod's first start
// (unitlet_podsync_pod_start_phase_seconds, from podsync first seeing the pod), its CRI
// calls (kubelet_runtime_operations_duration_seconds) and unitlet-status's status writes
// (kubelet_pod_status_sync_duration_seconds, from podsync's report until the API has it).

// histStat is one histogram series' sample count and sum.
type histStat struct {
	count uint64
	sum   float64
}

// histograms are series by "<family>{<first label's value>}".
type histograms map[string]histStat

// readHistograms reads a unitlet service's histograms of the named families over the bus.
func readHistograms(ctx context.Context, node, service string, families ...string) (histograms, error) {
	conn, err := bus.Dial(stack.NodeSocketDir(node), service)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := daemonv1.NewDaemonServiceClient(conn).GetMetrics(ctx, &daemonv1.GetMetricsRequest{})
	if err != nil {
		return nil, fmt.Errorf("the metrics of unitlet-%s: %w", service, err)
	}
	fams, err := daemon.DecodeMetrics(resp)
	if err != nil {
		return nil, err
	}
	out := histograms{}
	for _, f := range fams {
		if !slices.Contains(families, f.GetName()) {
			continue
		}
		for _, m := range f.GetMetric() {
			label := ""
			if len(m.GetLabel()) > 0 {
				label = m.GetLabel()[0].GetValue()
			}
			out[f.GetName()+"{"+label+"}"] = histStat{m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()}
		}
	}
	return out, nil
}

const (
	startPhaseFamily   = "unitlet_podsync_pod_start_phase_seconds"
	runtimeOpsFamily   = "kubelet_runtime_operations_duration_seconds"
	statusWritesFamily = "kubelet_pod_status_sync_duration_seconds"
)

// podTrace reads the histograms a breakdown needs from the node's podsync and status.
func podTrace(ctx context.Context, node string) (histograms, error) {
	out, err := readHistograms(ctx, node, "podsync", startPhaseFamily, runtimeOpsFamily)
	if err != nil {
		return nil, err
	}
	status, err := readHistograms(ctx, node, "status", statusWritesFamily)
	if err != nil {
		return nil, err
	}
	for k, v := range status {
		out[k] = v
	}
	return out, nil
}

// breakdownStep is one line of the breakdown: a mean in seconds over count samples; for a
// CRI call also the calls per pod and their time in all.
type breakdownStep struct {
	name          string
	count         uint64
	mean          float64
	perPod, total float64
}

// podBreakdown is what happened between two readings, for pods pods: podsync's steps (mean
// time from first seeing a pod to each step's end), unitlet-status's writes, then the CRI
// calls that took most time in all (mean per call, calls per pod).
func podBreakdown(before, after histograms, pods int) []breakdownStep {
	delta := func(key string) (uint64, float64) {
		a, b := after[key], before[key]
		return a.count - b.count, a.sum - b.sum
	}
	var steps []breakdownStep
	for _, phase := range []string{"sync_started", "cgroup", "volumes", "sandbox", "containers_started", "reported"} {
		if n, sum := delta(startPhaseFamily + "{" + phase + "}"); n > 0 {
			steps = append(steps, breakdownStep{name: "podsync: seen → " + phase, count: n, mean: sum / float64(n)})
		}
	}
	if n, sum := delta(statusWritesFamily + "{}"); n > 0 {
		steps = append(steps, breakdownStep{name: "status: a status change → in the API", count: n, mean: sum / float64(n), perPod: float64(n) / float64(pods)})
	}
	var ops []breakdownStep
	for key := range after {
		if !strings.HasPrefix(key, runtimeOpsFamily+"{") {
			continue
		}
		if n, sum := delta(key); n > 0 {
			op := strings.TrimSuffix(strings.TrimPrefix(key, runtimeOpsFamily+"{"), "}")
			ops = append(ops, breakdownStep{name: "CRI " + op, count: n, mean: sum / float64(n), perPod: float64(n) / float64(pods), total: sum})
		}
	}
	// The calls that took most time in all first.
	slices.SortFunc(ops, func(a, b breakdownStep) int {
		switch {
		case a.total > b.total:
			return -1
		case a.total < b.total:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return append(steps, ops...)
}
