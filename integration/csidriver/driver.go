// Package csidriver is the harness's own CSI test driver, run on a node as
// node-driver-registrar and a driver's node plugin run there: a registration socket in
// the node's plugins_registry speaking the kubelet's plugin registration API, and the
// driver's CSI socket (Identity and Node services). It records what the node asked, so
// tests can check the exact calls.
package csidriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Options are the driver's name, where its sockets go and what NodeGetInfo answers.
type Options struct {
	Name string
	// RegistrationDir is the node's <root-dir>/plugins_registry; the registration socket
	// is <Name>-reg.sock there.
	RegistrationDir string
	// Endpoint is the driver's CSI socket.
	Endpoint          string
	NodeID            string
	MaxVolumesPerNode int64
	Topology          map[string]string
	// StateDir holds the volumes' data: a directory per volume handle, or with Stage an
	// ext4 image per handle (<handle>.img), made on first use.
	StateDir string
	// Stage: the driver has STAGE_UNSTAGE_VOLUME; NodeStageVolume puts the volume's ext4
	// image on a loop device and mounts it at the staging path, NodePublishVolume
	// bind-mounts that at the target. Without it NodePublishVolume bind-mounts the
	// volume's directory.
	Stage bool
	// CallLog, when set, is a file each call is appended to (a JSON line), for a driver
	// run as its own process (StartProcess).
	CallLog string
}

// Driver is a running test driver.
type Driver struct {
	o       Options
	servers []*grpc.Server

	mu       sync.Mutex
	notified []*registerapi.RegistrationStatus
	calls    []Call
	// conditions are the volumes said to be abnormal, with why, by handle.
	conditions map[string]string
}

// SetCondition makes NodeGetVolumeStats say the volume is abnormal, with message ("":
// healthy again).
func (d *Driver) SetCondition(handle, message string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.conditions[handle] = message
}

// Call is one call the node made.
type Call struct {
	Method, VolumeID, Target, Staging string
	ReadOnly                          bool
	VolumeContext, PublishContext     map[string]string
	// Capability is left out of the call log (a oneof JSON cannot read back).
	Capability *csipb.VolumeCapability `json:"-"`
}

// Start serves the driver's CSI socket, then its registration socket (as
// node-driver-registrar starts once the driver answers).
func Start(o Options) (*Driver, error) {
	d := &Driver{o: o, conditions: map[string]string{}}
	csiServer := grpc.NewServer()
	csipb.RegisterIdentityServer(csiServer, identity{d})
	csipb.RegisterNodeServer(csiServer, &node{d: d})
	csipb.RegisterControllerServer(csiServer, &controller{d: d})
	if err := d.serve(csiServer, o.Endpoint); err != nil {
		return nil, err
	}
	regServer := grpc.NewServer()
	registerapi.RegisterRegistrationServer(regServer, registration{d: d})
	if err := d.serve(regServer, d.RegistrationSocket()); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// RegistrationSocket is the driver's socket in the node's plugins_registry.
func (d *Driver) RegistrationSocket() string {
	return filepath.Join(d.o.RegistrationDir, d.o.Name+"-reg.sock")
}

func (d *Driver) serve(s *grpc.Server, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	d.servers = append(d.servers, s)
	go func() { _ = s.Serve(l) }()
	return nil
}

// Unregister removes the registration socket, as node-driver-registrar does when it stops:
// the node takes the driver out.
func (d *Driver) Unregister() error {
	if len(d.servers) > 1 {
		d.servers[1].Stop()
	}
	if err := os.Remove(d.RegistrationSocket()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Stop stops serving and removes both sockets.
func (d *Driver) Stop() {
	for _, s := range d.servers {
		s.Stop()
	}
	_ = os.Remove(d.RegistrationSocket())
	_ = os.Remove(d.o.Endpoint)
}

// Notified are the registration statuses the node sent, in order.
func (d *Driver) Notified() []*registerapi.RegistrationStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*registerapi.RegistrationStatus(nil), d.notified...)
}

// Calls are the CSI calls the node made, in order.
func (d *Driver) Calls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Call(nil), d.calls...)
}

// VolumeCalls are the methods of the calls the node made for one volume, in order.
func (d *Driver) VolumeCalls(handle string) []string {
	var out []string
	for _, c := range d.Calls() {
		if c.VolumeID == handle {
			out = append(out, c.Method)
		}
	}
	return out
}

func (d *Driver) record(method string) { d.recordCall(Call{Method: method}) }

func (d *Driver) recordCall(c Call) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, c)
	if d.o.CallLog != "" && c.Method != "NodeGetInfo" && c.Method != "NodeGetCapabilities" {
		b, _ := json.Marshal(c)
		if f, err := os.OpenFile(d.o.CallLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err == nil {
			_, _ = f.Write(append(b, '\n'))
			_ = f.Close()
		}
	}
}

type registration struct {
	registerapi.UnimplementedRegistrationServer
	d *Driver
}

func (r registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.d.o.Name, Endpoint: r.d.o.Endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (r registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.d.mu.Lock()
	r.d.notified = append(r.d.notified, s)
	r.d.mu.Unlock()
	return &registerapi.RegistrationStatusResponse{}, nil
}

type identity struct{ d *Driver }

func (i identity) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	i.d.record("GetPluginInfo")
	return &csipb.GetPluginInfoResponse{Name: i.d.o.Name, VendorVersion: "0.1.0"}, nil
}

func (i identity) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	i.d.record("GetPluginCapabilities")
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: []*csipb.PluginCapability{{
		Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: csipb.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

func (i identity) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	i.d.record("Probe")
	return &csipb.ProbeResponse{}, nil
}
