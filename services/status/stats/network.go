package stats

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// defaultInterface is the interface whose figures a NetworkStats also carries at its top
// level, as the kubelet names it.
const defaultInterface = "eth0"

// ignoredInterfacePrefixes name the devices cadvisor leaves out of the node's network: the
// loopback, the pods' veth ends and container bridges.
var ignoredInterfacePrefixes = []string{"lo", "veth", "docker", "nerdctl"}

// nodeNetwork is the node's interfaces from <ProcRoot>/net/dev, less those cadvisor ignores.
func (p *Provider) nodeNetwork(now time.Time) (*statsv1alpha1.NetworkStats, error) {
	fs, err := procfs.NewFS(p.procRoot)
	if err != nil {
		return nil, err
	}
	dev, err := fs.NetDev()
	if err != nil {
		return nil, fmt.Errorf("read %s/net/dev: %w", p.procRoot, err)
	}
	s := &statsv1alpha1.NetworkStats{Time: metav1.NewTime(now)}
	for _, name := range slices.Sorted(maps.Keys(dev)) {
		if slices.ContainsFunc(ignoredInterfacePrefixes, func(prefix string) bool { return strings.HasPrefix(name, prefix) }) {
			continue
		}
		line := dev[name]
		i := statsv1alpha1.InterfaceStats{Name: name, RxBytes: &line.RxBytes, RxErrors: &line.RxErrors, TxBytes: &line.TxBytes, TxErrors: &line.TxErrors}
		if name == defaultInterface {
			s.InterfaceStats = i
		}
		s.Interfaces = append(s.Interfaces, i)
	}
	return s, nil
}
