package cis

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/bus"
)

// Host is the node this process runs on, unitlet-config reached through SocketDir.
type Host struct {
	SocketDir string
	// Timeout bounds each call to unitlet-config and each connection to the node API.
	Timeout time.Duration
}

var _ System = Host{}

func (h Host) NodeConfig(ctx context.Context) (*configv1.NodeConfig, error) {
	conn, err := bus.Dial(h.SocketDir, "config")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	resp, err := configv1.NewConfigServiceClient(conn).GetConfig(ctx, &configv1.GetConfigRequest{})
	if err != nil {
		return nil, fmt.Errorf("unitlet-config (%s): %w", bus.SocketPath(h.SocketDir, "config"), err)
	}
	return resp.GetConfig(), nil
}

func (h Host) Systemctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "systemctl", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("systemctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func (h Host) Stat(path string) File {
	f := File{Path: path}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return f
	case err != nil:
		f.Err = err.Error()
		return f
	}
	f.Exists = true
	f.Mode = fi.Mode()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		f.UID, f.GID = st.Uid, st.Gid
	}
	f.User, f.Group = strconv.Itoa(int(f.UID)), strconv.Itoa(int(f.GID))
	if u, err := user.LookupId(f.User); err == nil {
		f.User = u.Username
	}
	if g, err := user.LookupGroupId(f.Group); err == nil {
		f.Group = g.Name
	}
	return f
}

func (h Host) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

func (h Host) RegularFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

func (h Host) Container(ctx context.Context) string {
	// Exit 1 and "none" when not in a container.
	out, _ := exec.CommandContext(ctx, "systemd-detect-virt", "--container").Output()
	if s := strings.TrimSpace(string(out)); s != "none" {
		return s
	}
	return ""
}

// ProbeNodeAPI connects to the node API at address: the serving certificate, GET /pods
// with no credentials, and a TLS 1.2 handshake offering each cipher suite outside the
// benchmark's list alone.
func (h Host) ProbeNodeAPI(ctx context.Context, address string) NodeAPI {
	a := NodeAPI{Address: address}
	dialer := &net.Dialer{Timeout: h.Timeout}
	base := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the certificate is what is examined
	conn, err := tls.DialWithDialer(dialer, "tcp", address, base)
	if err != nil {
		a.Err = err.Error()
		return a
	}
	if certs := conn.ConnectionState().PeerCertificates; len(certs) > 0 {
		c := certs[0]
		a.CertSubject, a.CertIssuer = c.Subject.String(), c.Issuer.String()
		a.SelfSigned = bytes.Equal(c.RawSubject, c.RawIssuer) && c.CheckSignatureFrom(c) == nil
	}
	conn.Close()

	client := &http.Client{Timeout: h.Timeout, Transport: &http.Transport{TLSClientConfig: base.Clone(), DialContext: dialer.DialContext}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+address+"/pods", nil)
	if err == nil {
		if resp, err := client.Do(req); err != nil {
			a.Err = "GET /pods: " + err.Error()
		} else {
			a.AnonymousStatus = resp.StatusCode
			resp.Body.Close()
		}
	}
	client.CloseIdleConnections()

	suites := append(tls.CipherSuites(), tls.InsecureCipherSuites()...)
	for _, s := range suites {
		if !slices.Contains(s.SupportedVersions, tls.VersionTLS12) || strongSuite(s.Name) {
			continue
		}
		a.SuitesProbed = append(a.SuitesProbed, s.Name)
		cfg := base.Clone()
		cfg.MinVersion, cfg.MaxVersion, cfg.CipherSuites = tls.VersionTLS10, tls.VersionTLS12, []uint16{s.ID}
		if c, err := tls.DialWithDialer(dialer, "tcp", address, cfg); err == nil {
			a.WeakSuitesAccepted = append(a.WeakSuitesAccepted, s.Name)
			c.Close()
		}
	}
	return a
}
