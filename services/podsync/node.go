package podsync

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/nodeinfo"
)

// localNode is the node as admission sees it: built from the configuration and the
// machine's resources.
func localNode(nc *nodeconfig.Config, machine nodeinfo.Machine) (*corev1.Node, error) {
	node, err := nodeinfo.Node(nc.KubeletConfiguration, nc.Identity(), machine)
	if err != nil {
		return nil, daemon.ConfigError(err)
	}
	return node, nil
}
