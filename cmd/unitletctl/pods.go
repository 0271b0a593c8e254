package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/payload"
)

// podRow is one pod as `unitletctl pods` shows it.
type podRow struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	UID       string           `json:"uid"`
	Source    string           `json:"source"`
	Phase     string           `json:"phase"`
	Ready     string           `json:"ready"`
	Restarts  int32            `json:"restarts"`
	Age       string           `json:"age"`
	IP        string           `json:"ip"`
	MirrorUID string           `json:"mirrorUID,omitempty"`
	State     string           `json:"state"`
	Status    corev1.PodStatus `json:"status"`
}

func podsCmd(ctx context.Context, g globals, now time.Time) error {
	ctx, conn, path, done, err := connect(ctx, g, "podsync")
	if err != nil {
		return err
	}
	defer done()
	pods, err := listPods(ctx, podsyncv1.NewPodSyncServiceClient(conn))
	if err != nil {
		return explain("podsync", path, err)
	}
	rows := podRows(pods, now, g.stderr)
	if g.output == "json" {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tSTATUS\tREADY\tRESTARTS\tAGE\tIP\tSOURCE")
	for _, r := range rows {
		ip := r.IP
		if ip == "" {
			ip = "<none>"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Namespace, r.Name, r.State, r.Ready, r.Restarts, r.Age, ip, r.Source)
	}
	if len(rows) == 0 {
		fmt.Fprintln(g.stdout, "no pods on this node")
		return nil
	}
	return tw.Flush()
}

// listPods is every pod podsync has, from ListPodsStream's parts (no message grows with
// the node's pods), or from ListPods when podsync predates ListPodsStream.
func listPods(ctx context.Context, c podsyncv1.PodSyncServiceClient) ([]*podsyncv1.Pod, error) {
	stream, err := c.ListPodsStream(ctx, &podsyncv1.ListPodsStreamRequest{})
	var pods []*podsyncv1.Pod
	for err == nil {
		var part *podsyncv1.ListPodsStreamResponse
		if part, err = stream.Recv(); err == nil {
			pods = append(pods, part.GetPods()...)
		}
	}
	switch {
	case errors.Is(err, io.EOF):
		return pods, nil
	case status.Code(err) == codes.Unimplemented:
		resp, err := c.ListPods(ctx, &podsyncv1.ListPodsRequest{})
		if err != nil {
			return nil, err
		}
		return resp.GetPods(), nil
	}
	return nil, err
}

// podRows are the rows of pods. A pod whose status is in a schema this unitletctl does not
// know (a newer podsync's) is left out, with a warning naming it on warn.
func podRows(pods []*podsyncv1.Pod, now time.Time, warn io.Writer) []podRow {
	rows := make([]podRow, 0, len(pods))
	for _, p := range pods {
		if err := payload.PodsyncPodStatus.Check(p.GetStatusSchema()); err != nil {
			fmt.Fprintf(warn, "unitletctl: pod %s/%s left out: %v\n", p.GetNamespace(), p.GetName(), err)
			continue
		}
		rows = append(rows, toRow(p, now))
	}
	return rows
}

// toRow summarises a pod as kubectl get pods does: STATUS is the phase, or the reason a
// container is waiting or terminated, or Terminating.
func toRow(p *podsyncv1.Pod, now time.Time) podRow {
	r := podRow{Namespace: p.GetNamespace(), Name: p.GetName(), UID: p.GetUid(), Source: p.GetSource(), MirrorUID: p.GetMirrorUid()}
	_ = json.Unmarshal(p.GetStatus(), &r.Status)
	st := r.Status
	r.Phase, r.IP = string(st.Phase), st.PodIP
	ready := 0
	for _, cs := range st.ContainerStatuses {
		if cs.Ready {
			ready++
		}
		r.Restarts += cs.RestartCount
	}
	r.Ready = fmt.Sprintf("%d/%d", ready, len(st.ContainerStatuses))
	if t := p.GetFirstSeen(); t != nil {
		r.Age = age(now.Sub(t.AsTime()))
	}
	r.State = r.Phase
	if st.Reason != "" {
		r.State = st.Reason
	}
	for i, cs := range st.InitContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" {
			r.State = "Init:" + w.Reason
		} else if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			if r.State == string(corev1.PodPending) {
				r.State = fmt.Sprintf("Init:%d/%d", i, len(st.InitContainerStatuses))
			}
		}
		if strings.HasPrefix(r.State, "Init:") {
			break
		}
	}
	if !strings.HasPrefix(r.State, "Init:") {
		for _, cs := range st.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason != "" {
				r.State = w.Reason
			} else if t := cs.State.Terminated; t != nil && t.Reason != "" && st.Phase != corev1.PodRunning {
				r.State = t.Reason
			}
		}
	}
	if p.GetTerminating() && !p.GetTerminated() {
		r.State = "Terminating"
	}
	return r
}

// age is a duration as kubectl prints ages: 45s, 3m12s, 5h, 2d.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 10*time.Minute:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 3*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}
