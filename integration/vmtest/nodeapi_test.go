package vmtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/unitlet/unitlet/integration/harness"
)

// The guest is behind qemu's user-mode network: neither the host nor the API server's node
// proxy reaches its node API. guestNodeAPIGet reaches it through the agent instead: each
// connection is a relay (perl, the guest's only scripting tool) to 127.0.0.1:<nodeAPIPort>
// in the guest, its standard input and output the TLS stream of a request made with the
// cluster-admin's client certificate, which the node API authenticates and authorizes as it
// would the API server's proxied request.
func guestNodeAPIGet(ctx context.Context, t *testing.T, path string) (int, string, error) {
	t.Helper()
	n := vmNode(t)
	cfg, err := harness.RESTConfig(stack.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The node's serving certificate is not what is tested here.
	tlsConfig.InsecureSkipVerify = true
	relay := `use IO::Socket::INET; my $s = IO::Socket::INET->new("127.0.0.1:` + strconv.Itoa(n.NodeAPIPort) + `") or die "connect: $!";
binmode STDIN; binmode STDOUT; $| = 1;
if (fork) { while (sysread(STDIN, my $b, 65536)) { syswrite($s, $b) } shutdown($s, 1); wait }
else { while (sysread($s, my $b, 65536)) { syswrite(STDOUT, $b) } }`
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   tlsConfig,
		DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			cmd := stack.Exec(n.Name, []string{"perl", "-e", relay})
			in, err := cmd.StdinPipe()
			if err != nil {
				return nil, err
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				return nil, err
			}
			if err := cmd.Start(); err != nil {
				return nil, err
			}
			return &cmdConn{Reader: out, in: in, cmd: cmd}, nil
		},
	}}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://%s:%d%s", n.Name, n.NodeAPIPort, path), nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// cmdConn is a connection over a command's standard input and output.
type cmdConn struct {
	io.Reader
	in  io.WriteCloser
	cmd *exec.Cmd
}

func (c *cmdConn) Write(b []byte) (int, error) { return c.in.Write(b) }

func (c *cmdConn) Close() error {
	_ = c.in.Close()
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	return nil
}

func (c *cmdConn) LocalAddr() net.Addr              { return &net.UnixAddr{Net: "unix", Name: "vm-agent"} }
func (c *cmdConn) RemoteAddr() net.Addr             { return &net.UnixAddr{Net: "unix", Name: "vm-agent"} }
func (c *cmdConn) SetDeadline(time.Time) error      { return nil }
func (c *cmdConn) SetReadDeadline(time.Time) error  { return nil }
func (c *cmdConn) SetWriteDeadline(time.Time) error { return nil }
