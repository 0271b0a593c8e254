package podsync

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/payload"
)

// prepareTimeout bounds one PrepareVolumes call: it blocks until the volumes are ready.
const prepareTimeout = 2 * time.Minute

// busVolumes is unitlet-volumes over the bus, for the pod workers.
type busVolumes struct {
	socket string
	conn   *grpc.ClientConn
	client volumesv1.VolumesServiceClient
}

// dialVolumes returns unitlet-volumes on the bus in socketDir; it connects on first use.
func dialVolumes(socketDir string) (*busVolumes, error) {
	conn, err := bus.Dial(socketDir, "volumes")
	if err != nil {
		return nil, err
	}
	return &busVolumes{socket: bus.SocketPath(socketDir, "volumes"), conn: conn, client: volumesv1.NewVolumesServiceClient(conn)}, nil
}

// Close closes the connection.
func (v *busVolumes) Close() error { return v.conn.Close() }

// Prepare asks unitlet-volumes to make the pod's volumes ready.
func (v *busVolumes) Prepare(ctx context.Context, pod *corev1.Pod) (map[string][]criconfig.Mount, error) {
	if _, err := os.Stat(v.socket); err != nil {
		return nil, fmt.Errorf("unitlet-volumes is not running (no socket at %s): start it with `systemctl start unitlet-volumes.socket`", v.socket)
	}
	req, err := prepareRequest(pod, "")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, prepareTimeout)
	defer cancel()
	resp, err := v.client.PrepareVolumes(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("%s", grpcstatus.Convert(err).Message())
	}
	return fromProto(pod, "", resp.GetContainers())
}

// PrepareContainer asks unitlet-volumes for one container's mounts just before it starts,
// its subPaths resolved and bind-mounted again.
func (v *busVolumes) PrepareContainer(ctx context.Context, pod *corev1.Pod, container string) ([]criconfig.Mount, error) {
	if _, err := os.Stat(v.socket); err != nil {
		return nil, fmt.Errorf("unitlet-volumes is not running (no socket at %s): start it with `systemctl start unitlet-volumes.socket`", v.socket)
	}
	req, err := prepareRequest(pod, container)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, prepareTimeout)
	defer cancel()
	resp, err := v.client.PrepareVolumes(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("%s", grpcstatus.Convert(err).Message())
	}
	// An older unitlet-volumes answers for every container.
	mounts, err := fromProto(pod, container, resp.GetContainers())
	if err != nil {
		return nil, err
	}
	return mounts[container], nil
}

// prepareRequest is the PrepareVolumes request for pod: every container's mounts, or
// container's alone when it is not empty.
func prepareRequest(pod *corev1.Pod, container string) (*volumesv1.PrepareVolumesRequest, error) {
	b, err := json.Marshal(&corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: busMeta(pod.ObjectMeta), Spec: pod.Spec, Status: pod.Status})
	if err != nil {
		return nil, fmt.Errorf("encode the pod for unitlet-volumes: %w", err)
	}
	return &volumesv1.PrepareVolumesRequest{Pod: b, PodSchema: payload.VolumesPod.Write, Container: container}, nil
}

// fromProto is the containers' mounts and devices by container. A container (only
// container, when it is not empty) whose
// volumeDevices did not all come back (a unitlet-volumes older than block volumes) is an
// error: the container never starts without its devices.
func fromProto(pod *corev1.Pod, container string, cms []*volumesv1.ContainerMounts) (map[string][]criconfig.Mount, error) {
	out := map[string][]criconfig.Mount{}
	devices := map[string]map[string]bool{}
	for _, cm := range cms {
		c := cm.GetContainer()
		for _, m := range cm.GetMounts() {
			out[c] = append(out[c], criconfig.Mount{
				ContainerPath: m.GetContainerPath(), HostPath: m.GetHostPath(), ReadOnly: m.GetReadOnly(), Propagation: criPropagation(m.GetPropagation()),
			})
		}
		for _, d := range cm.GetDevices() {
			out[c] = append(out[c], criconfig.Mount{ContainerPath: d.GetContainerPath(), HostPath: d.GetHostPath(), ReadOnly: d.GetReadOnly(), Device: true})
			if devices[c] == nil {
				devices[c] = map[string]bool{}
			}
			devices[c][d.GetContainerPath()] = true
		}
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for _, d := range c.VolumeDevices {
			if container != "" && c.Name != container {
				break
			}
			if !devices[c.Name][d.DevicePath] {
				return nil, fmt.Errorf("container %s: unitlet-volumes did not hand over the device of volume %s (volumeDevices): upgrade unitlet-volumes to one that serves block volumes", c.Name, d.Name)
			}
		}
	}
	return out, nil
}

// Release asks unitlet-volumes to tear down a terminated pod's volumes. Without its
// socket there is nothing it prepared that it could release now; its orphan cleanup
// releases them when it runs again.
func (v *busVolumes) Release(ctx context.Context, pod *corev1.Pod) error {
	if len(pod.Spec.Volumes) == 0 {
		return nil
	}
	if _, err := os.Stat(v.socket); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, prepareTimeout)
	defer cancel()
	if _, err := v.client.ReleaseVolumes(ctx, &volumesv1.ReleaseVolumesRequest{PodUid: string(pod.UID)}); err != nil {
		return fmt.Errorf("release volumes: %s", grpcstatus.Convert(err).Message())
	}
	return nil
}

func criPropagation(p volumesv1.MountPropagation) runtimeapi.MountPropagation {
	switch p {
	case volumesv1.MountPropagation_MOUNT_PROPAGATION_HOST_TO_CONTAINER:
		return runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
	case volumesv1.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL:
		return runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
	}
	return runtimeapi.MountPropagation_PROPAGATION_PRIVATE
}
