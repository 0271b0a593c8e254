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
	grpc      net.Listener
	metrics   net.Listener // nil: no metrics listener
	activated bool         // the bus socket came from systemd
}

func (l *listeners) close() {
	if l.grpc != nil {
		l.grpc.Close()
	}
	if l.metrics != nil {
		l.metrics.Close()
	}
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
		if l.grpc, err = listenUnix(bus.SocketPath(s.SocketDir, service)); err != nil {
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
	return l, nil
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

// listenUnix binds a Unix socket at path with mode 0660 and group unitlet (when the group
// exists). A socket file left behind by a dead process is replaced; a socket something still
// answers on is not.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("bus socket directory: %w", err)
	}
	l, err := net.Listen("unix", path)
	if errors.Is(err, syscall.EADDRINUSE) {
		if err := removeStaleSocket(path); err != nil {
			return nil, err
		}
		l, err = net.Listen("unix", path)
	}
	if err != nil {
		return nil, fmt.Errorf("bus socket: %w", err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("bus socket %s: %w", path, err)
	}
	if gid, ok := socketGID(); ok {
		if err := os.Chown(path, -1, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("bus socket %s: %w", path, err)
		}
	}
	return l, nil
}

func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("bus socket %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("bus socket %s: the path exists and is not a socket; remove it or set %sSOCKET_DIR", path, envconfig.Prefix)
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return fmt.Errorf("bus socket %s: another process is serving on it (is the service already running, or its systemd .socket unit active?)", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("bus socket %s: remove stale socket: %w", path, err)
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
