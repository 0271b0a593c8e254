package podsync

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/services/podsync/podworker"
)

// podDirsPeriod is how often gone pods' directories are swept. The kubelet looks every
// housekeeping (2 s); a directory left is only disk, so less often does.
const podDirsPeriod = 10 * time.Second

// sweepPodDirs removes, every podDirsPeriod until ctx ends, the directories in podsDir of
// pods whose content may go (podworker.SweepPodDirs), and their allocation checkpoints in
// stateDir (podworker.SweepAllocations).
func sweepPodDirs(podsDir, stateDir string, removable func() func(types.UID) bool, clk clock.WithTicker, log *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		if podsDir == "" {
			<-ctx.Done()
			return nil
		}
		t := clk.NewTicker(podDirsPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C():
			}
			removed, err := podworker.SweepPodDirs(podsDir, removable)
			if err != nil {
				log.Warn("sweep the pod directories", "err", err)
			}
			for _, dir := range removed {
				log.Debug("removed a gone pod's directory", "dir", dir)
			}
			if err := podworker.SweepAllocations(stateDir, removable); err != nil {
				log.Warn("sweep the pods' allocation checkpoints", "err", err)
			}
		}
	}
}
