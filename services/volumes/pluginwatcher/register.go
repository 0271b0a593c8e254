package pluginwatcher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// pluginKey names a plugin: names are unique within a type.
type pluginKey struct {
	typ, name string
}

// registration is a plugin a Handler took, and the socket it came through.
type registration struct {
	Plugin
	handler Handler
	sock    *socket
}

// serve registers the plugin behind s, trying again with a growing wait until it works or
// s ends, then waits for s to end and deregisters the plugin if the socket was removed.
// ctx is Run's: a deregistration waiting for its turn gives up when the Watcher stops.
func (w *Watcher) serve(ctx context.Context, s *socket) {
	var reg *registration
	for wait := initialBackoff; ; wait = min(2*wait, maxBackoff) {
		var err error
		reg, err = w.register(s)
		if err == nil {
			break
		}
		if s.ctx.Err() != nil {
			w.log.Debug("plugin registration abandoned", "socket", s.path, "err", err)
			return
		}
		w.log.Error("plugin registration failed; trying again", "socket", s.path, "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	<-s.ctx.Done()
	if s.removed() {
		w.deregister(ctx, reg, "its socket was removed")
	}
}

// register makes one attempt at registering the plugin behind s, as the kubelet's
// GenerateRegisterPluginFunc: GetInfo, the type's handler, ValidatePlugin, RegisterPlugin,
// and NotifyRegistrationStatus with the outcome.
func (w *Watcher) register(s *socket) (*registration, error) {
	conn, err := connect(s)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)

	infoCtx, cancel := context.WithTimeout(s.ctx, getInfoTimeout)
	info, err := client.GetInfo(infoCtx, &registerapi.InfoRequest{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("get plugin info from socket %s: %w", s.path, err)
	}

	handler, ok := w.handlers[info.Type]
	if !ok {
		accepted := "no plugins"
		if len(w.handlers) > 0 {
			accepted = "plugins of type " + strings.Join(slices.Sorted(maps.Keys(w.handlers)), ", ")
		}
		return nil, w.refuse(s, client, fmt.Errorf("plugin %q at socket %s has type %q; this node takes %s",
			info.Name, s.path, info.Type, accepted))
	}
	endpoint := info.Endpoint
	if endpoint == "" {
		endpoint = s.path
	}
	reg := &registration{
		Plugin:  Plugin{Type: info.Type, Name: info.Name, Endpoint: endpoint, SocketPath: s.path},
		handler: handler,
		sock:    s,
	}
	key := pluginKey{info.Type, info.Name}

	unlock, err := w.lockPlugin(s.ctx, key)
	if err != nil {
		return nil, err
	}
	defer unlock()

	// The plugin of a removed socket goes before the new one is validated: a restarted
	// driver would otherwise be refused as a duplicate of itself.
	if cur := w.current(key); cur != nil && cur.sock.removed() {
		w.deregisterLocked(cur, "its socket was removed")
	}
	if err := handler.ValidatePlugin(info.Name, endpoint, info.SupportedVersions); err != nil {
		return nil, w.refuse(s, client, fmt.Errorf("plugin %q at socket %s failed validation: %w", info.Name, s.path, err))
	}
	if err := s.ctx.Err(); err != nil {
		return nil, err
	}
	if cur := w.current(key); cur != nil {
		w.deregisterLocked(cur, "replaced by the plugin at socket "+s.path)
	}
	if err := handler.RegisterPlugin(info.Name, endpoint, info.SupportedVersions, nil); err != nil {
		return nil, w.refuse(s, client, fmt.Errorf("register plugin %q at socket %s: %w", info.Name, s.path, err))
	}
	// From here on the plugin is registered: the notification is sent even if the socket
	// goes or the Watcher stops meanwhile, and only its own timeout cuts it short.
	if err := notify(context.WithoutCancel(s.ctx), client, true, ""); err != nil {
		handler.DeRegisterPlugin(info.Name, endpoint)
		return nil, fmt.Errorf("plugin %q at socket %s was registered, then deregistered because it could not be told: %w", info.Name, s.path, err)
	}
	w.mu.Lock()
	w.plugins[key] = reg
	w.mu.Unlock()
	w.log.Info("plugin registered", "type", info.Type, "plugin", info.Name, "endpoint", endpoint, "socket", s.path, "versions", info.SupportedVersions)
	return reg, nil
}

// refuse tells the plugin why it was not registered and returns that reason.
func (w *Watcher) refuse(s *socket, client registerapi.RegistrationClient, reason error) error {
	if err := notify(s.ctx, client, false, reason.Error()); err != nil {
		return fmt.Errorf("%w (and telling the plugin failed: %v)", reason, err)
	}
	return reason
}

// notify sends the registration outcome to the plugin.
func notify(ctx context.Context, client registerapi.RegistrationClient, registered bool, reason string) error {
	ctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	_, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: registered, Error: reason})
	if err != nil {
		return fmt.Errorf("notify registration status: %w", err)
	}
	return nil
}

// connect opens a gRPC connection to s and waits, up to dialTimeout, for it to be up or to
// have failed. A failed connection is returned too: the first call on it fails at once
// with the reason (connection refused, no such file).
func connect(s *socket) (*grpc.ClientConn, error) {
	// The target only names the connection; the dialer ignores it and dials the socket,
	// whose path may hold characters a target URL may not.
	conn, err := grpc.NewClient("passthrough:///localhost",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return dialSocket(ctx, s)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("connect to plugin socket %s: %w", s.path, err)
	}
	ctx, cancel := context.WithTimeout(s.ctx, dialTimeout)
	defer cancel()
	conn.Connect()
	for {
		state := conn.GetState()
		if state == connectivity.Ready || state == connectivity.TransientFailure {
			return conn, nil
		}
		if !conn.WaitForStateChange(ctx, state) {
			conn.Close()
			return nil, fmt.Errorf("connect to plugin socket %s: not connected within %v: %w", s.path, dialTimeout, ctx.Err())
		}
	}
}

// listenGrace is how long after its creation a socket that refuses connections is dialled
// again at once. A plugin's socket file appears when the plugin binds it, a moment before
// the plugin listens on it; a socket refusing connections for longer has no plugin behind
// it and waits for the backoff.
const listenGrace = time.Second

// dialSocket connects to s, waiting out a refusal while s is newer than listenGrace.
func dialSocket(ctx context.Context, s *socket) (net.Conn, error) {
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "unix", s.path)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Since(s.bound) > listenGrace {
			return c, err
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// lockPlugin takes key's turn for handler calls, waiting for the one in progress if any;
// it gives up when ctx ends. The returned func gives the turn back.
func (w *Watcher) lockPlugin(ctx context.Context, key pluginKey) (func(), error) {
	w.mu.Lock()
	turn, ok := w.pluginLocks[key]
	if !ok {
		turn = make(chan struct{}, 1)
		w.pluginLocks[key] = turn
	}
	w.mu.Unlock()
	select {
	case turn <- struct{}{}:
		return func() { <-turn }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// current is the registered plugin of key, or nil.
func (w *Watcher) current(key pluginKey) *registration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.plugins[key]
}

// deregister withdraws reg, in key's turn, unless it was withdrawn or replaced meanwhile.
func (w *Watcher) deregister(ctx context.Context, reg *registration, why string) {
	unlock, err := w.lockPlugin(ctx, pluginKey{reg.Type, reg.Name})
	if err != nil {
		// The Watcher is stopping, which leaves plugins registered.
		return
	}
	defer unlock()
	if w.current(pluginKey{reg.Type, reg.Name}) == reg {
		w.deregisterLocked(reg, why)
	}
}

// deregisterLocked withdraws reg; the caller holds its key's turn.
func (w *Watcher) deregisterLocked(reg *registration, why string) {
	w.mu.Lock()
	delete(w.plugins, pluginKey{reg.Type, reg.Name})
	w.mu.Unlock()
	reg.handler.DeRegisterPlugin(reg.Name, reg.Endpoint)
	w.log.Info("plugin deregistered", "type", reg.Type, "plugin", reg.Name, "endpoint", reg.Endpoint, "socket", reg.SocketPath, "reason", why)
}
