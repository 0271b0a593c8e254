package cis

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
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

// ListeningTCP reads the process's open files for its sockets and its network namespace's
// TCP tables (/proc/<pid>/net/tcp and tcp6) for those that listen.
func (h Host) ListeningTCP(pid int) ([]string, error) {
	proc := fmt.Sprintf("/proc/%d", pid)
	fds, err := os.ReadDir(proc + "/fd")
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(proc, "fd", fd.Name()))
		if err != nil {
			continue // closed since the directory was read
		}
		if ino, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(proc + "/net/" + table)
		if errors.Is(err, fs.ErrNotExist) && table == "tcp6" {
			continue // no IPv6 in the kernel
		}
		if err != nil {
			return nil, err
		}
		addrs, err := listeningIn(b, inodes)
		if err != nil {
			return nil, fmt.Errorf("%s/net/%s: %w", proc, table, err)
		}
		out = append(out, addrs...)
	}
	return out, nil
}

// tcpListen is the state of a listening socket in /proc/net/tcp.
const tcpListen = "0A"

// listeningIn reads a /proc/net/tcp or tcp6 table: the local addresses of the listening
// sockets among inodes.
func listeningIn(table []byte, inodes map[string]bool) ([]string, error) {
	var out []string
	lines := strings.Split(strings.TrimSpace(string(table)), "\n")
	for _, line := range lines[1:] { // a header first
		f := strings.Fields(line)
		if len(f) < 10 {
			return nil, fmt.Errorf("a line of %d fields, want at least 10: %q", len(f), line)
		}
		if f[3] != tcpListen || !inodes[f[9]] {
			continue
		}
		addr, err := procNetAddress(f[1])
		if err != nil {
			return nil, err
		}
		out = append(out, addr)
	}
	return out, nil
}

// procNetAddress decodes /proc/net/tcp's address:port: the address in hexadecimal as the
// kernel keeps it, 32-bit words in the machine's byte order, the port in hexadecimal.
func procNetAddress(s string) (string, error) {
	hexIP, hexPort, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if !ok || err != nil || (len(hexIP) != 8 && len(hexIP) != 32) {
		return "", fmt.Errorf("local address %q: want hex address:port", s)
	}
	raw, err := hex.DecodeString(hexIP)
	if err != nil {
		return "", fmt.Errorf("local address %q: %v", s, err)
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.BigEndian.PutUint32(ip[i:], binary.NativeEndian.Uint32(raw[i:]))
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port))), nil
}

// ProbeHTTP asks address for each path with no credentials: over TLS when a handshake
// succeeds (no client certificate offered), else plain HTTP. Redirects are not followed.
func (h Host) ProbeHTTP(ctx context.Context, address string, paths []string) HTTPProbe {
	p := HTTPProbe{Address: address, Scheme: "http", Status: map[string]int{}}
	dialer := &net.Dialer{Timeout: h.Timeout}
	base := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // what is asked is whether it answers, not who it is
	if c, err := tls.DialWithDialer(dialer, "tcp", address, base); err == nil {
		c.Close()
		p.Scheme = "https"
	}
	client := &http.Client{
		Timeout:       h.Timeout,
		Transport:     &http.Transport{TLSClientConfig: base.Clone(), DialContext: dialer.DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer client.CloseIdleConnections()
	for _, path := range paths {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.Scheme+"://"+address+path, nil)
		if err != nil {
			p.Err = err.Error()
			return p
		}
		resp, err := client.Do(req)
		if err != nil {
			p.Err = fmt.Sprintf("GET %s: %v", path, err)
			return p
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		p.Status[path] = resp.StatusCode
	}
	return p
}
