package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	statusv1 "github.com/unitlet/unitlet/proto/unitlet/status/v1"
)

// nodeCmd shows the node as unitlet-status reports it to the API server: registration,
// conditions, lease and pod status writes.
func nodeCmd(ctx context.Context, g globals, now time.Time) error {
	ctx, conn, path, done, err := connect(ctx, g, "status")
	if err != nil {
		return err
	}
	defer done()
	resp, err := statusv1.NewStatusServiceClient(conn).GetNodeStatus(ctx, &statusv1.GetNodeStatusRequest{})
	if err != nil {
		return explain("status", path, err)
	}
	st := resp.GetStatus()
	if g.output == "json" {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(st)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(g.stdout, string(b))
		return err
	}
	registered := "yes"
	switch {
	case st.GetStandalone():
		registered = "no (standalone: no kubeconfig, nothing is written to an API server)"
	case !st.GetRegistered():
		registered = "not yet: " + st.GetRegistrationError()
	}
	when := func(t interface{ AsTime() time.Time }, set bool) string {
		if !set {
			return "never"
		}
		return age(now.Sub(t.AsTime())) + " ago"
	}
	fmt.Fprintf(g.stdout, "node:            %s\n", st.GetNodeName())
	fmt.Fprintf(g.stdout, "registered:      %s\n", registered)
	fmt.Fprintf(g.stdout, "status written:  %s\n", when(st.GetLastStatusUpdate(), st.GetLastStatusUpdate() != nil))
	fmt.Fprintf(g.stdout, "lease renewed:   %s\n", when(st.GetLastLeaseRenew(), st.GetLastLeaseRenew() != nil))
	fmt.Fprintf(g.stdout, "pod statuses:    %d written, %d pending\n", st.GetPodStatusWrites(), st.GetPodStatusPending())
	fmt.Fprintf(g.stdout, "node API:        %s\n", orNone(st.GetNodeApiAddress()))
	if len(st.GetConditions()) == 0 {
		return nil
	}
	fmt.Fprintln(g.stdout)
	tw := tabwriter.NewWriter(g.stdout, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "CONDITION\tSTATUS\tREASON\tSINCE\tMESSAGE")
	for _, c := range st.GetConditions() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.GetType(), c.GetStatus(), c.GetReason(), when(c.GetLastTransitionTime(), c.GetLastTransitionTime() != nil), c.GetMessage())
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
