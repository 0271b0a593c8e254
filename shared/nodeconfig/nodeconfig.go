// Package nodeconfig reads the node's configuration from unitlet-config over the bus, as
// every other service does at start.
package nodeconfig

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/nodeinfo"
	"github.com/unitlet/unitlet/shared/payload"
)

// Wait bounds the wait for unitlet-config at a service's start.
const Wait = 30 * time.Second

// Config is one generation of the node configuration, decoded.
type Config struct {
	KubeletConfiguration *kubeletconfigv1beta1.KubeletConfiguration
	Node                 *configv1.NodeIdentity
	Paths                *configv1.Paths
	Generation           uint64
	// Raw is the KubeletConfiguration as unitlet-config sent it (JSON), for /configz.
	Raw []byte
}

// Get asks unitlet-config for the configuration in effect, waiting up to Wait for it to
// start (its socket is activated, so the call waits in the backlog while it does).
func Get(ctx context.Context, socketDir string) (*Config, error) {
	conn, err := bus.Dial(socketDir, "config")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, Wait)
	defer cancel()
	resp, err := configv1.NewConfigServiceClient(conn).GetConfig(cctx, &configv1.GetConfigRequest{})
	if err != nil {
		return nil, fmt.Errorf("get the node configuration from unitlet-config (%s): %w", bus.SocketPath(socketDir, "config"), err)
	}
	return Decode(resp.GetConfig())
}

// Decode turns a bus NodeConfig into a Config. The KubeletConfiguration is decoded
// leniently: a newer unitlet-config may set fields this reader does not know. One in a
// schema this reader does not know is refused (payload.ConfigKubeletConfiguration).
func Decode(nc *configv1.NodeConfig) (*Config, error) {
	kc := &kubeletconfigv1beta1.KubeletConfiguration{}
	if err := payload.ConfigKubeletConfiguration.DecodeJSON(nc.GetKubeletConfigurationSchema(), nc.GetKubeletConfiguration(), kc); err != nil {
		return nil, fmt.Errorf("decode the KubeletConfiguration from unitlet-config: %w", err)
	}
	c := &Config{KubeletConfiguration: kc, Node: nc.GetNode(), Paths: nc.GetPaths(), Generation: nc.GetGeneration(), Raw: nc.GetKubeletConfiguration()}
	if c.Node.GetName() == "" || c.Paths.GetRootDir() == "" {
		return nil, fmt.Errorf("unitlet-config gave no node name or root dir")
	}
	return c, nil
}

// Identity is the node's identity for nodeinfo.Node.
func (c *Config) Identity() nodeinfo.Identity {
	id := nodeinfo.Identity{Name: c.Node.GetName(), Hostname: c.Node.GetHostname(), IPs: c.Node.GetIps(), Labels: c.Node.GetLabels()}
	for _, t := range c.Node.GetTaints() {
		id.Taints = append(id.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return id
}
