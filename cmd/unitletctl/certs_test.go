package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	certsv1 "github.com/unitlet/unitlet/proto/unitlet/certs/v1"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/envconfig"
)

// fakeCerts is unitlet-certs with a valid client certificate and no serving one; Rotate
// goes through two states before it answers.
type fakeCerts struct {
	certsv1.UnimplementedCertsServiceServer
	states chan []*certsv1.Certificate
}

var fakeNotAfter = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func fakeClientCert(state, serial string) *certsv1.Certificate {
	return &certsv1.Certificate{
		Kind: certsv1.CertificateKind_CERTIFICATE_KIND_CLIENT, Subject: "CN=system:node:node-a,O=system:nodes",
		Serial: serial, NotAfter: timestamppb.New(fakeNotAfter), NextRotation: timestamppb.New(fakeNotAfter.Add(-time.Hour)), State: state,
	}
}

func fakeList(client *certsv1.Certificate) []*certsv1.Certificate {
	return []*certsv1.Certificate{client, {
		Kind: certsv1.CertificateKind_CERTIFICATE_KIND_SERVING, State: "not requested: serverTLSBootstrap is false",
	}}
}

func (fakeCerts) ListCertificates(context.Context, *certsv1.ListCertificatesRequest) (*certsv1.ListCertificatesResponse, error) {
	return &certsv1.ListCertificatesResponse{Certificates: fakeList(fakeClientCert("valid", "17"))}, nil
}

func (f fakeCerts) WatchCertificates(_ *certsv1.WatchCertificatesRequest, stream certsv1.CertsService_WatchCertificatesServer) error {
	if err := stream.Send(&certsv1.WatchCertificatesResponse{Sequence: 1, Certificates: fakeList(fakeClientCert("valid", "17"))}); err != nil {
		return err
	}
	for seq := uint64(2); ; seq++ {
		select {
		case <-stream.Context().Done():
			return nil
		case list := <-f.states:
			if err := stream.Send(&certsv1.WatchCertificatesResponse{Sequence: seq, Certificates: list}); err != nil {
				return err
			}
		}
	}
}

func (f fakeCerts) Rotate(_ context.Context, req *certsv1.RotateRequest) (*certsv1.RotateResponse, error) {
	if req.GetKind() == certsv1.CertificateKind_CERTIFICATE_KIND_SERVING {
		return nil, status.Error(codes.FailedPrecondition, "nothing to rotate: not requested: serverTLSBootstrap is false")
	}
	f.states <- fakeList(fakeClientCert("rotating: submitted CSR csr-1 (signer kubernetes.io/kube-apiserver-client-kubelet), waiting for approval and issuance", "17"))
	f.states <- fakeList(fakeClientCert("valid", "18"))
	return &certsv1.RotateResponse{Certificate: fakeClientCert("valid", "18")}, nil
}

func serveCerts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var s daemon.Settings
	if err := envconfig.Parse(&s, map[string]string{"UNITLET_SOCKET_DIR": dir}); err != nil {
		t.Fatal(err)
	}
	d := daemon.New(daemon.Options{Service: "certs", Settings: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	certsv1.RegisterCertsServiceServer(d.Server(), fakeCerts{states: make(chan []*certsv1.Certificate, 4)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(dir, "certs.sock")); err == nil {
			return dir
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the fake certs service did not start")
	return ""
}

func TestCerts(t *testing.T) {
	dir := serveCerts(t)
	out, errOut, code := ctl("--socket-dir="+dir, "certs")
	if code != 0 {
		t.Fatalf("certs: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "KIND") || !strings.Contains(lines[0], "NEXT-ROTATION") ||
		!strings.HasPrefix(lines[1], "client") || !strings.Contains(lines[1], "CN=system:node:node-a") || !strings.HasSuffix(lines[1], "valid") ||
		!strings.HasPrefix(lines[2], "serving") || !strings.Contains(lines[2], "serverTLSBootstrap is false") {
		t.Fatalf("certs:\n%s", out)
	}

	out, _, code = ctl("--socket-dir="+dir, "-o", "json", "certs")
	var resp struct {
		Certificates []struct{ Kind, Serial, State string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &resp) != nil || len(resp.Certificates) != 2 || resp.Certificates[0].Serial != "17" {
		t.Fatalf("certs -o json: exit %d\n%s", code, out)
	}

	out, errOut, code = ctl("--socket-dir="+dir, "certs", "rotate")
	if code != 0 {
		t.Fatalf("certs rotate: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "client: rotating: submitted CSR csr-1") || !strings.Contains(out, "client: valid") ||
		!strings.Contains(out, "rotated the client certificate: serial 18, not after ") {
		t.Fatalf("certs rotate:\n%s", out)
	}

	if _, errOut, code = ctl("--socket-dir="+dir, "certs", "rotate", "serving"); code != 1 || !strings.Contains(errOut, "serverTLSBootstrap is false") {
		t.Fatalf("certs rotate serving: exit %d: %s", code, errOut)
	}
	if _, _, code = ctl("--socket-dir="+dir, "certs", "rotate", "other"); code != 2 {
		t.Fatalf("certs rotate other: exit %d", code)
	}
	// --wait is certs rotate's, before the command or after it, and no other command's.
	for _, args := range [][]string{{"certs", "rotate", "serving", "--wait", "30s"}, {"--wait=30s", "certs", "rotate", "serving"}} {
		if _, errOut, code = ctl(append([]string{"--socket-dir=" + dir}, args...)...); code != 1 || !strings.Contains(errOut, "serverTLSBootstrap is false") {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	if _, errOut, code = ctl("--socket-dir="+dir, "certs", "--wait", "30s"); code != 2 || !strings.Contains(errOut, "--wait applies to certs rotate only") {
		t.Fatalf("certs --wait: exit %d: %s", code, errOut)
	}
}
