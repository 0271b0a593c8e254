package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
)

// evictionCmd shows node pressure as unitlet-eviction last observed it: each signal against
// its thresholds, the pressure conditions and the last evictions.
func evictionCmd(ctx context.Context, g globals, now time.Time) error {
	ctx, conn, path, done, err := connect(ctx, g, "eviction")
	if err != nil {
		return err
	}
	defer done()
	resp, err := evictionv1.NewEvictionServiceClient(conn).GetState(ctx, &evictionv1.GetStateRequest{})
	if status.Code(err) == codes.Unimplemented {
		return fmt.Errorf("this unitlet-eviction (%s) does not report its state (unitlet.eviction.v1 GetState): upgrade it", path)
	}
	if err != nil {
		return explain("eviction", path, err)
	}
	st := resp.GetState()
	if g.output == "json" {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(st)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(g.stdout, string(b))
		return err
	}
	return writeEvictionState(g.stdout, st, now)
}

// writeEvictionState prints the state as three tables: signals, conditions, evictions.
func writeEvictionState(w io.Writer, st *evictionv1.State, now time.Time) error {
	ago := func(t time.Time) string { return relative(t, now) }
	if st.GetObserved() == nil {
		fmt.Fprintln(w, "observed:  not yet")
	} else {
		t := st.GetObserved().AsTime()
		fmt.Fprintf(w, "observed:  %s (%s)\n", stamp(t), ago(t))
	}
	if st.GetError() != "" {
		fmt.Fprintf(w, "error:     the last observation failed: %s\n", st.GetError())
	}

	fmt.Fprintln(w)
	if len(st.GetSignals()) == 0 {
		fmt.Fprintln(w, "no signals observed yet")
	} else {
		tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
		fmt.Fprintln(tw, "NAME\tAVAILABLE\tCAPACITY\tHARD\tSOFT")
		var unobserved []string
		for _, s := range st.GetSignals() {
			avail, capacity := dash(s.GetAvailable()), dash(s.GetCapacity())
			if !s.GetObserved() {
				avail, capacity = "?", "?"
				unobserved = append(unobserved, fmt.Sprintf("%s: not observed: %s", s.GetName(), orNone(s.GetError())))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.GetName(), avail, capacity,
				thresholdsCell(s.GetThresholds(), "hard", now), thresholdsCell(s.GetThresholds(), "soft", now))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, u := range unobserved {
			fmt.Fprintln(w, oneLineText(u))
		}
	}

	fmt.Fprintln(w)
	if len(st.GetConditions()) == 0 {
		fmt.Fprintln(w, "no pressure conditions yet")
	} else {
		tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
		fmt.Fprintln(tw, "TYPE\tSTATUS\tREASON\tSINCE")
		for _, c := range st.GetConditions() {
			since := "-"
			if c.GetLastTransitionTime() != nil {
				since = ago(c.GetLastTransitionTime().AsTime())
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.GetType(), c.GetStatus(), dash(c.GetReason()), since)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(w)
	if len(st.GetEvictions()) == 0 {
		fmt.Fprintln(w, "no evictions")
		return nil
	}
	fmt.Fprintln(w, "LAST EVICTIONS")
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "TIME\tPOD\tSIGNAL\tGRACE\tMESSAGE")
	for _, e := range st.GetEvictions() {
		when := "-"
		if e.GetTime() != nil {
			t := e.GetTime().AsTime()
			when = fmt.Sprintf("%s (%s)", stamp(t), ago(t))
		}
		msg := dash(e.GetMessage())
		if e.GetError() != "" {
			msg = "not evicted: " + e.GetError()
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%ds\t%s\n", when, e.GetNamespace(), e.GetName(), dash(e.GetSignal()), e.GetGracePeriodSeconds(), oneLineText(msg))
	}
	return tw.Flush()
}

// thresholdsCell is a signal's thresholds of one kind ("hard" or "soft") in a cell: the
// resolved value with the configured one when they differ ("5Gi (10%)"), a soft
// threshold's grace period and how long ago it was first crossed, and MET when the
// threshold is met; "-" when the signal has none.
func thresholdsCell(ts []*evictionv1.Threshold, kind string, now time.Time) string {
	var cells []string
	for _, t := range ts {
		if t.GetKind() != kind {
			continue
		}
		c := dash(t.GetResolved())
		if v := t.GetValue(); v != "" && v != t.GetResolved() {
			c += " (" + v + ")"
		}
		if kind == "soft" {
			var extra []string
			if t.GetGracePeriod() != "" {
				extra = append(extra, "grace "+t.GetGracePeriod())
			}
			if t.GetCrossed() && t.GetFirstCrossed() != nil {
				extra = append(extra, "crossed "+relative(t.GetFirstCrossed().AsTime(), now))
			} else if t.GetCrossed() {
				extra = append(extra, "crossed")
			}
			if len(extra) > 0 {
				c += " " + strings.Join(extra, ", ")
			}
		}
		if t.GetMet() {
			c += " MET"
		}
		cells = append(cells, c)
	}
	if len(cells) == 0 {
		return "-"
	}
	return strings.Join(cells, "; ")
}

// oneLineText keeps a table row on one line.
func oneLineText(s string) string { return strings.Join(strings.Fields(s), " ") }
