package csidriver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// controller is the driver's Controller service, enough for csi-sanity to make and delete
// volumes: a volume is its data in StateDir (a directory, or with Stage an ext4 image),
// its requested size beside it. The harness itself provisions static PVs.
type controller struct {
	csipb.UnimplementedControllerServer
	d *Driver
}

func (c *controller) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	res := &csipb.ControllerGetCapabilitiesResponse{}
	for _, t := range []csipb.ControllerServiceCapability_RPC_Type{csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME} {
		res.Capabilities = append(res.Capabilities, &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}}})
	}
	return res, nil
}

// volumeData is where a volume's data is; sizeFile where its requested size is.
func (d *Driver) volumeData(id string) string {
	if d.o.Stage {
		return filepath.Join(d.o.StateDir, id+".img")
	}
	return filepath.Join(d.o.StateDir, id)
}

func (d *Driver) sizeFile(id string) string { return filepath.Join(d.o.StateDir, id+".size") }

// exists reports whether the volume was made (by CreateVolume, or a first stage or
// publish of a static PV's handle).
func (d *Driver) exists(id string) bool {
	_, err := os.Stat(d.volumeData(id))
	return err == nil
}

func (c *controller) CreateVolume(_ context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	c.d.recordCall(Call{Method: "CreateVolume", VolumeID: req.GetName()})
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name: required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities: required")
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume_content_source: this driver makes empty volumes only")
	}
	if err := validHandle(req.GetName()); err != nil {
		return nil, err
	}
	id := req.GetName()
	size := req.GetCapacityRange().GetRequiredBytes()
	if size == 0 {
		size = imageSize
	}
	if b, err := os.ReadFile(c.d.sizeFile(id)); err == nil {
		if old, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); old != size {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes, not %d", id, old, size)
		}
	}
	if err := os.MkdirAll(c.d.o.StateDir, 0o700); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	var err error
	if c.d.o.Stage {
		err = makeImage(c.d.volumeData(id))
	} else {
		err = os.MkdirAll(c.d.volumeData(id), 0o755)
	}
	if err == nil {
		err = os.WriteFile(c.d.sizeFile(id), []byte(strconv.FormatInt(size, 10)), 0o600)
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: id, CapacityBytes: size, VolumeContext: req.GetParameters()}}, nil
}

func (c *controller) DeleteVolume(_ context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	c.d.recordCall(Call{Method: "DeleteVolume", VolumeID: req.GetVolumeId()})
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id: required")
	}
	if validHandle(req.GetVolumeId()) != nil {
		return &csipb.DeleteVolumeResponse{}, nil // no such volume: deleted already
	}
	for _, p := range []string{c.d.volumeData(req.GetVolumeId()), c.d.sizeFile(req.GetVolumeId())} {
		if err := os.RemoveAll(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csipb.DeleteVolumeResponse{}, nil
}

func (c *controller) ValidateVolumeCapabilities(_ context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id: required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities: required")
	}
	if validHandle(req.GetVolumeId()) != nil || !c.d.exists(req.GetVolumeId()) {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", req.GetVolumeId())
	}
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}, nil
}

// ControllerExpandVolume records the new size; the file system grows on the node
// (NodeExpandVolume).
func (c *controller) ControllerExpandVolume(_ context.Context, req *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id: required")
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity_range: required")
	}
	if validHandle(req.GetVolumeId()) != nil || !c.d.exists(req.GetVolumeId()) {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", req.GetVolumeId())
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	if err := os.WriteFile(c.d.sizeFile(req.GetVolumeId()), []byte(strconv.FormatInt(size, 10)), 0o600); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: true}, nil
}
