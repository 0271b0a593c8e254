package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	certsv1 "github.com/unitlet/unitlet/proto/unitlet/certs/v1"
)

// certsCmd shows the node's certificates as unitlet-certs keeps them, or with "rotate
// [client|serving]" forces a rotation and follows it until the new certificate is in use.
func certsCmd(ctx context.Context, g globals, args []string, now time.Time) error {
	if len(args) > 0 && args[0] == "rotate" {
		return certsRotateCmd(ctx, g, args[1:])
	}
	if len(args) > 0 {
		return usageError(fmt.Errorf("certs: unknown argument %q; want nothing, or rotate [client|serving]", args[0]))
	}
	ctx, conn, path, done, err := connect(ctx, g, "certs")
	if err != nil {
		return err
	}
	defer done()
	resp, err := certsv1.NewCertsServiceClient(conn).ListCertificates(ctx, &certsv1.ListCertificatesRequest{})
	if err != nil {
		return explain("certs", path, err)
	}
	if g.output == "json" {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(resp)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(g.stdout, string(b))
		return err
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "KIND\tSUBJECT\tNOT-AFTER\tNEXT-ROTATION\tSTATE")
	for _, c := range resp.GetCertificates() {
		notAfter, next := "-", "-"
		if c.GetNotAfter() != nil {
			notAfter = fmt.Sprintf("%s (%s)", stamp(c.GetNotAfter().AsTime()), relative(c.GetNotAfter().AsTime(), now))
		}
		if c.GetNextRotation() != nil {
			next = fmt.Sprintf("%s (%s)", stamp(c.GetNextRotation().AsTime()), relative(c.GetNextRotation().AsTime(), now))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", kindName(c.GetKind()), dash(c.GetSubject()), notAfter, next, c.GetState())
	}
	return tw.Flush()
}

// certsRotateCmd forces a rotation, printing each state the certificate goes through.
func certsRotateCmd(ctx context.Context, g globals, args []string) error {
	kind := certsv1.CertificateKind_CERTIFICATE_KIND_CLIENT
	switch len(args) {
	case 0:
	case 1:
		switch args[0] {
		case "client":
		case "serving":
			kind = certsv1.CertificateKind_CERTIFICATE_KIND_SERVING
		default:
			return usageError(fmt.Errorf("certs rotate: unknown kind %q; want client or serving", args[0]))
		}
	default:
		return usageError(fmt.Errorf("certs rotate: want at most one kind, client or serving"))
	}
	conn, path, err := dial(g, "certs")
	if err != nil {
		return err
	}
	defer conn.Close()
	client := certsv1.NewCertsServiceClient(conn)
	ctx, cancel := context.WithTimeout(ctx, g.rotateWait)
	defer cancel()

	// Progress: every state the certificate goes through while the rotation runs.
	wctx, stopWatch := context.WithCancel(ctx)
	stream, err := client.WatchCertificates(wctx, &certsv1.WatchCertificatesRequest{})
	if err != nil {
		stopWatch()
		return explain("certs", path, err)
	}
	subscribed, watched := make(chan struct{}), make(chan struct{})
	shown := make(chan string, 64) // the serial of each list's certificate, once printed
	go func() {
		defer close(watched)
		last := ""
		for i := 0; ; i++ {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			for _, c := range resp.GetCertificates() {
				if c.GetKind() != kind {
					continue
				}
				if c.GetState() != last {
					if i > 0 { // the first list is the state before the call
						fmt.Fprintf(g.stdout, "%s  %s: %s\n", time.Now().Format(time.TimeOnly), kindName(kind), c.GetState())
					}
					last = c.GetState()
				}
				select {
				case shown <- c.GetSerial():
				default:
				}
			}
			if i == 0 {
				close(subscribed)
			}
		}
	}()
	select { // without progress lines if the watch fails; Rotate says why
	case <-subscribed:
	case <-watched:
	}
	resp, err := client.Rotate(ctx, &certsv1.RotateRequest{Kind: kind})
	if err == nil {
		// The answer may overtake the watch: show the progress up to the new certificate.
		waitShown(shown, watched, resp.GetCertificate().GetSerial(), progressCatchUp)
	}
	stopWatch()
	<-watched
	if err != nil {
		return explain("certs", path, err)
	}
	c := resp.GetCertificate()
	fmt.Fprintf(g.stdout, "rotated the %s certificate: serial %s, not after %s\n", kindName(kind), c.GetSerial(), stamp(c.GetNotAfter().AsTime()))
	return nil
}

// progressCatchUp bounds the wait for the watch to show the certificate Rotate returned.
const progressCatchUp = 2 * time.Second

// waitShown waits until the watch has shown the certificate with serial, the watch ended,
// or limit passed.
func waitShown(shown <-chan string, watched <-chan struct{}, serial string, limit time.Duration) {
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	for {
		select {
		case s := <-shown:
			if s == serial {
				return
			}
		case <-watched:
			return
		case <-timeout.C:
			return
		}
	}
}

func kindName(k certsv1.CertificateKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "CERTIFICATE_KIND_"))
}

// relative is "in 3h" or "5m ago".
func relative(t, now time.Time) string {
	if d := t.Sub(now); d >= 0 {
		return "in " + age(d)
	}
	return age(now.Sub(t)) + " ago"
}
