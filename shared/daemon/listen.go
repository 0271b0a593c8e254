package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"

	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/envconfig"
)

// Names of the sockets a systemd socket unit passes in (FileDescriptorName=).
const (
	FDNameGRPC    = "grpc"
	FDNameMetrics = "metrics"
)

// SocketGroup owns the bus sockets: its members may connect.
const SocketGroup = "unitlet"

// listeners are the sockets the process serves on.
type listeners struct {
	grpc net.Listener
	// metrics is the TCP listener (UNITLET_METRICS_ADDR) or the one systemd passed named
	// "metrics"; pages the Unix socket of UNITLET_METRICS_SOCKET. nil: none.
	metrics, pages net.Listener
	activated      bool // the bus socket came from systemd
}

func (l *listeners) close() {
	for _, c := range []net.Listener{l.grpc, l.metrics, l.pages} {
		if c != nil {
			c.Close()
		}
	}
}

// http are the HTTP listeners, metrics first.
func (l *listeners) http() []net.Listener {
	var out []net.Listener
	for _, c := range []net.Listener{l.metrics, l.pages} {
		if c != nil {
			out = append(out, c)
		}
	}
	return out
}

// listen takes the sockets systemd passed (LISTEN_FDS), or else binds its own: the bus socket
// in the socket directory and the metrics address when one is set.
func listen(service string, s Settings) (*listeners, error) {
	l := &listeners{}
	if os.Getenv("LISTEN_FDS") != "" {
		named, err := activation.ListenersWithNames()
		if err != nil {
			return nil, fmt.Errorf("socket activation: %w", err)
		}
		if l.grpc, err = pickActivated(named); err != nil {
			return nil, err
		}
		l.activated = true
		if ms := named[FDNameMetrics]; len(ms) > 0 {
			l.metrics = ms[0]
		}
	} else {
		var err error
		if l.grpc, err = listenUnix(bus.SocketPath(s.SocketDir, service), busSocket); err != nil {
			return nil, err
		}
	}
	if l.metrics == nil && s.MetricsAddr != "" {
		m, err := net.Listen("tcp", s.MetricsAddr)
		if err != nil {
			l.close()
			return nil, fmt.Errorf("metrics listener %s: %w", s.MetricsAddr, err)
		}
		l.metrics = m
	}
	if s.MetricsSocket != "" {
		m, err := listenUnix(s.MetricsSocket, metricsSocket)
		if err != nil {
			l.close()
			return nil, err
		}
		l.pages = m
	}
	return l, nil
}

// servesPages reports whether the metrics listener l may serve more than /healthz: only a
// Unix socket with a path, which the file's owner, group and mode guard. A TCP port (or an
// abstract Unix socket) answers every local user and every hostNetwork pod, with no
// credentials asked: it serves /healthz alone, as the kubelet's healthz port does.
func servesPages(l net.Listener) bool {
	a := l.Addr()
	return a.Network() == "unix" && filepath.IsAbs(a.String())
}

// pickActivated chooses the bus socket among those systemd passed: the one named "grpc", or
// the only one when a single socket came without a name.
func pickActivated(named map[string][]net.Listener) (net.Listener, error) {
	if g := named[FDNameGRPC]; len(g) > 0 {
		return g[0], nil
	}
	var names []string
	var all []net.Listener
	for name, ls := range named {
		names = append(names, name)
		all = append(all, ls...)
	}
	sort.Strings(names)
	if len(all) == 1 && len(names) == 1 && names[0] != FDNameMetrics {
		return all[0], nil
	}
	return nil, fmt.Errorf("socket activation: no stream socket named %q among %v (set FileDescriptorName=%s in the .socket unit)", FDNameGRPC, names, FDNameGRPC)
}

// unixSocket says what listenUnix makes.
type unixSocket struct {
	what    string // names it in errors
	setting string // the variable that moves it
	mode    fs.FileMode
	group   bool // given to group unitlet, when the group exists
}

var (
	// busSocket is a service's own bus socket when systemd passes none: 0660, group
	// unitlet, as the .socket units make it.
	busSocket = unixSocket{what: "bus socket", setting: envconfig.Prefix + "SOCKET_DIR", mode: 0o660, group: true}
	// metricsSocket (UNITLET_METRICS_SOCKET) is the process owner's alone, mode 0600.
	// It cannot be given to a group under the shipped units: they keep no capability and
	// their system call filter refuses chown. A socket unit that passes an fd named
	// "metrics" sets its owner and mode itself (SocketGroup=, SocketMode=).
	metricsSocket = unixSocket{what: "metrics socket", setting: envconfig.Prefix + "METRICS_SOCKET", mode: 0o600}
)

// listenUnix binds a Unix socket at path as k says. A socket file left behind by a dead
// process is replaced; a socket something still answers on is not.
func listenUnix(path string, k unixSocket) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("%s directory: %w", k.what, err)
	}
	l, err := net.Listen("unix", path)
	if errors.Is(err, syscall.EADDRINUSE) {
		if err := removeStaleSocket(path, k); err != nil {
			return nil, err
		}
		l, err = net.Listen("unix", path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k.what, err)
	}
	if err := os.Chmod(path, k.mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("%s %s: %w", k.what, path, err)
	}
	if gid, ok := socketGID(); ok && k.group {
		if err := os.Chown(path, -1, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("%s %s: %w", k.what, path, err)
		}
	}
	return l, nil
}

func removeStaleSocket(path string, k unixSocket) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", k.what, path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s %s: the path exists and is not a socket; remove it or set %s", k.what, path, k.setting)
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return fmt.Errorf("%s %s: another process is serving on it (is the service already running, or its systemd .socket unit active?)", k.what, path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s %s: remove stale socket: %w", k.what, path, err)
	}
	return nil
}

func socketGID() (int, bool) {
	g, err := user.LookupGroup(SocketGroup)
	if err != nil {
		return 0, false
	}
	gid, err := strconv.Atoi(g.Gid)
	return gid, err == nil
}

// isClosed reports whether err only says that a listener or connection was closed: the sign
// of a requested stop, not a failure.
func isClosed(err error) bool {
	return err == nil || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "use of closed network connection")
}
