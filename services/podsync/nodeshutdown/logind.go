package nodeshutdown

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/login1"
	"github.com/godbus/dbus/v5"
)

// logind's names on the system bus.
const (
	logindName      = "org.freedesktop.login1"
	logindPath      = dbus.ObjectPath("/org/freedesktop/login1")
	logindManager   = "org.freedesktop.login1.Manager"
	prepareShutdown = "PrepareForShutdown"
)

// systemLogind is logind on the system bus: go-systemd's login1 for the inhibitor and the
// signal, and a second connection of godbus's for the manager's properties, which login1
// does not read.
type systemLogind struct {
	login *login1.Conn
	bus   *dbus.Conn

	mu    sync.Mutex
	owner string // logind's unique name on the bus, the only sender believed
}

// DialLogind connects to logind over the system bus.
func DialLogind() (Logind, error) {
	login, err := login1.New()
	if err != nil {
		return nil, fmt.Errorf("connect to the system bus for logind: %w", err)
	}
	bus, err := dbus.SystemBusPrivate()
	if err == nil {
		if err = bus.Auth(nil); err == nil {
			err = bus.Hello()
		}
		if err != nil {
			_ = bus.Close()
		}
	}
	if err != nil {
		login.Close()
		return nil, fmt.Errorf("connect to the system bus for logind's properties: %w", err)
	}
	return &systemLogind{login: login, bus: bus}, nil
}

func (l *systemLogind) property(name string) (dbus.Variant, error) {
	return l.bus.Object(logindName, logindPath).GetProperty(logindManager + "." + name)
}

// InhibitDelayMax reads logind's InhibitDelayMaxUSec (InhibitDelayMaxSec in logind.conf).
func (l *systemLogind) InhibitDelayMax() (time.Duration, error) {
	v, err := l.property("InhibitDelayMaxUSec")
	if err != nil {
		return 0, fmt.Errorf("read logind's InhibitDelayMaxUSec: %w", err)
	}
	usec, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("logind's InhibitDelayMaxUSec is a %s, not a uint64", v.Signature())
	}
	return time.Duration(usec) * time.Microsecond, nil
}

// PreparingForShutdown reads logind's PreparingForShutdown.
func (l *systemLogind) PreparingForShutdown() (bool, error) {
	v, err := l.property("PreparingForShutdown")
	if err != nil {
		return false, fmt.Errorf("read logind's PreparingForShutdown: %w", err)
	}
	b, ok := v.Value().(bool)
	if !ok {
		return false, fmt.Errorf("logind's PreparingForShutdown is a %s, not a bool", v.Signature())
	}
	return b, nil
}

// Inhibit takes a delay inhibitor on shutdown; the file logind hands back is the lock.
func (l *systemLogind) Inhibit() (io.Closer, error) {
	f, err := l.login.Inhibit("shutdown", "unitlet-podsync", "unitlet-podsync ends the node's pods before it shuts down", "delay")
	if err != nil {
		return nil, err
	}
	return f, nil
}

// ShutdownSignals follows PrepareForShutdown. Only signals logind itself sent count: on
// the system bus any client may emit a signal of that name, and one that made podsync
// end every pod must not be taken from anyone but logind (the kubelet's match has no
// sender). A sender that is not logind's current unique name is checked once against the
// bus (logind may have restarted) and otherwise dropped.
func (l *systemLogind) ShutdownSignals() (<-chan bool, error) {
	if _, err := l.lookupOwner(); err != nil {
		return nil, err
	}
	in := l.login.Subscribe(prepareShutdown)
	out := make(chan bool, 1)
	go func() {
		defer close(out)
		for sig := range in {
			if sig == nil || sig.Name != logindManager+"."+prepareShutdown || sig.Path != logindPath || len(sig.Body) == 0 {
				continue
			}
			begins, ok := sig.Body[0].(bool)
			if !ok || !l.fromLogind(sig.Sender) {
				continue
			}
			out <- begins
		}
	}()
	return out, nil
}

func (l *systemLogind) lookupOwner() (string, error) {
	var owner string
	if err := l.bus.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, logindName).Store(&owner); err != nil {
		return "", fmt.Errorf("find logind on the system bus: %w", err)
	}
	l.mu.Lock()
	l.owner = owner
	l.mu.Unlock()
	return owner, nil
}

func (l *systemLogind) fromLogind(sender string) bool {
	l.mu.Lock()
	owner := l.owner
	l.mu.Unlock()
	if sender == owner {
		return true
	}
	owner, err := l.lookupOwner()
	return err == nil && sender == owner
}

// Close closes both connections; the signal channel then closes.
func (l *systemLogind) Close() error {
	l.login.Close()
	return l.bus.Close()
}
