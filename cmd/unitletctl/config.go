package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/payload"
)

func configCmd(parent context.Context, g globals) error {
	ctx, conn, path, done, err := connect(parent, g, "config")
	if err != nil {
		return err
	}
	defer done()
	client := configv1.NewConfigServiceClient(conn)
	cfg, err := client.GetConfig(ctx, &configv1.GetConfigRequest{})
	if err != nil {
		return explain("config", path, err)
	}
	st, err := client.GetReloadStatus(ctx, &configv1.GetReloadStatusRequest{})
	if err != nil {
		return explain("config", path, err)
	}
	// Older unitlet-configs have no bootstrap status; the rest of the output stands without it.
	boot, bootErr := client.GetBootstrapStatus(ctx, &configv1.GetBootstrapStatusRequest{})
	c := cfg.GetConfig()
	if err := payload.ConfigKubeletConfiguration.Check(c.GetKubeletConfigurationSchema()); err != nil {
		return fmt.Errorf("unitlet-config sent a configuration this unitletctl cannot read (a newer unitlet-config?): %w", err)
	}
	// Secrets stay out of terminals and logs even for root, who can read the files.
	kc, err := nodeconfig.Redact(c.GetKubeletConfiguration())
	if err != nil {
		return fmt.Errorf("unitlet-config sent a configuration that is not JSON: %w", err)
	}
	if g.output == "json" {
		var out bytes.Buffer
		if err := json.Indent(&out, kc, "", "  "); err != nil {
			return fmt.Errorf("unitlet-config sent a configuration that is not JSON: %w", err)
		}
		out.WriteByte('\n')
		_, err := g.stdout.Write(out.Bytes())
		return err
	}
	y, err := yaml.JSONToYAML(kc)
	if err != nil {
		return fmt.Errorf("unitlet-config sent a configuration that is not JSON: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# generation: %d (loaded %s)\n", c.GetGeneration(), stamp(c.GetLoadTime().AsTime()))
	b.WriteString("# sources, in the order applied:\n")
	for _, s := range c.GetSources() {
		fmt.Fprintf(&b, "#   %s", sourceName(s.GetKind()))
		if s.GetName() != "" {
			fmt.Fprintf(&b, " %s", s.GetName())
		}
		if s.GetSha256() != "" {
			fmt.Fprintf(&b, " (sha256 %.12s)", s.GetSha256())
		}
		b.WriteByte('\n')
	}
	n := c.GetNode()
	fmt.Fprintf(&b, "# node: %s, IPs %s\n", n.GetName(), dash(strings.Join(n.GetIps(), ",")))
	keys := make([]string, 0, len(n.GetLabels()))
	for k := range n.GetLabels() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "#   label %s=%s\n", k, n.GetLabels()[k])
	}
	for _, t := range n.GetTaints() {
		fmt.Fprintf(&b, "#   taint %s=%s:%s\n", t.GetKey(), t.GetValue(), t.GetEffect())
	}
	p := c.GetPaths()
	fmt.Fprintf(&b, "# paths: root-dir %s, cert-dir %s, kubeconfig %s, bootstrap-kubeconfig %s\n",
		p.GetRootDir(), p.GetCertDir(), dash(p.GetKubeconfig()), dash(p.GetBootstrapKubeconfig()))
	r := st.GetStatus()
	if r.GetLastReloadSuccessful() {
		fmt.Fprintf(&b, "# last reload: succeeded %s (trigger: %s)\n", stamp(r.GetLastAttemptTime().AsTime()), r.GetTrigger())
	} else {
		fmt.Fprintf(&b, "# last reload: FAILED %s (trigger: %s): %s\n#   generation %d stays in effect; last success %s\n",
			stamp(r.GetLastAttemptTime().AsTime()), r.GetTrigger(), r.GetLastError(), c.GetGeneration(), stamp(r.GetLastSuccessTime().AsTime()))
	}
	b.WriteString(bootstrapLine(boot.GetStatus(), bootErr))
	// The other services are asked each within its own --timeout, not within what is
	// left of unitlet-config's.
	b.WriteString(generationsLine(parent, g, c.GetGeneration()))
	b.Write(y)
	_, err = fmt.Fprint(g.stdout, b.String())
	return err
}

// bootstrapCmd shows unitlet-config's TLS bootstrap: a table, or the status as JSON.
func bootstrapCmd(ctx context.Context, g globals) error {
	ctx, conn, path, done, err := connect(ctx, g, "config")
	if err != nil {
		return err
	}
	defer done()
	resp, err := configv1.NewConfigServiceClient(conn).GetBootstrapStatus(ctx, &configv1.GetBootstrapStatusRequest{})
	if status.Code(err) == codes.Unimplemented {
		return fmt.Errorf("this unitlet-config (%s) does not report its TLS bootstrap: upgrade it", path)
	}
	if err != nil {
		return explain("config", path, err)
	}
	st := resp.GetStatus()
	if g.output == "json" {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(st)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(g.stdout, "%s\n", b)
		return err
	}
	when := func(ts *timestamppb.Timestamp) string {
		if ts == nil {
			return "-"
		}
		return stamp(ts.AsTime())
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 8, 3, ' ', 0)
	for _, row := range [][2]string{
		{"STATE", strings.TrimPrefix(st.GetState().String(), "BOOTSTRAP_STATE_")},
		{"SINCE", when(st.GetLastTransitionTime())},
		{"MESSAGE", dash(st.GetMessage())},
		{"ATTEMPTS", fmt.Sprint(st.GetAttempts())},
		{"CSR", dash(st.GetCsrName())},
		{"CERTIFICATE NOT AFTER", when(st.GetCertificateNotAfter())},
		{"NEXT ATTEMPT", when(st.GetNextAttemptTime())},
		{"LAST ERROR", dash(st.GetLastError())},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	return tw.Flush()
}

// generationsLine is the "# services:" line: the generation each other service runs, and
// those waiting for a restart to take a newer one.
func generationsLine(ctx context.Context, g globals, serving uint64) string {
	var parts []string
	for _, st := range probeAll(ctx, g, slices.DeleteFunc(slices.Clone(bus.Services), func(s string) bool { return s == "config" })) {
		svc := st.Service
		switch {
		case !st.SocketPresent:
			parts = append(parts, svc+" not running")
		case !st.Reachable:
			parts = append(parts, svc+" not answering ("+st.Error+")")
		case st.ConfigGeneration == 0:
			parts = append(parts, svc+" (does not report it)")
		case st.PendingConfigGeneration != 0:
			parts = append(parts, fmt.Sprintf("%s %d (%d after a restart of unitlet-%s: %s)", svc, st.ConfigGeneration, st.PendingConfigGeneration, svc, strings.Join(st.PendingConfigFields, ", ")))
		case st.ConfigGeneration != serving:
			parts = append(parts, fmt.Sprintf("%s %d (has not taken %d yet)", svc, st.ConfigGeneration, serving))
		default:
			parts = append(parts, fmt.Sprintf("%s %d", svc, st.ConfigGeneration))
		}
	}
	return "# services' generations: " + strings.Join(parts, ", ") + "\n"
}

// bootstrapLine is the "# TLS bootstrap:" line: the state, and what to know about it.
func bootstrapLine(st *configv1.BootstrapStatus, err error) string {
	if status.Code(err) == codes.Unimplemented {
		return "# TLS bootstrap: unknown (this unitlet-config does not report it)\n"
	}
	if err != nil {
		return fmt.Sprintf("# TLS bootstrap: unknown: %s\n", status.Convert(err).Message())
	}
	state := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(st.GetState().String(), "BOOTSTRAP_STATE_")), "_", " ")
	if st.GetState() == configv1.BootstrapState_BOOTSTRAP_STATE_FAILED {
		state = "FAILED"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# TLS bootstrap: %s", state)
	if st.GetLastTransitionTime() != nil {
		fmt.Fprintf(&b, " since %s", stamp(st.GetLastTransitionTime().AsTime()))
	}
	switch st.GetState() {
	case configv1.BootstrapState_BOOTSTRAP_STATE_FAILED:
		fmt.Fprintf(&b, " (attempt %d, next %s): %s", st.GetAttempts(), stamp(st.GetNextAttemptTime().AsTime()), st.GetLastError())
	case configv1.BootstrapState_BOOTSTRAP_STATE_BOOTSTRAPPING, configv1.BootstrapState_BOOTSTRAP_STATE_WAITING_FOR_APPROVAL:
		fmt.Fprintf(&b, " (attempt %d): %s", st.GetAttempts(), st.GetMessage())
	default:
		fmt.Fprintf(&b, ": %s", st.GetMessage())
		if st.GetCertificateNotAfter() != nil {
			fmt.Fprintf(&b, "; client certificate valid until %s", stamp(st.GetCertificateNotAfter().AsTime()))
		}
	}
	b.WriteByte('\n')
	return b.String()
}

func stamp(t time.Time) string { return t.Local().Format(time.RFC3339) }

func sourceName(k configv1.SourceKind) string {
	name := strings.TrimPrefix(k.String(), "SOURCE_KIND_")
	return strings.ReplaceAll(strings.ToLower(name), "_", "-")
}
