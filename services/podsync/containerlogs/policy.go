// Package containerlogs keeps the logs the runtime writes for containers as the kubelet
// does: it rotates each running container's log file when it reaches containerLogMaxSize
// (renamed to <log>.<YYYYMMDD-hhmmss>, the runtime told to reopen its file), compresses all
// but the newest rotated file, keeps at most containerLogMaxFiles files per container,
// removes a container's files with the container, and keeps the links
// /var/log/containers/<pod>_<namespace>_<container>-<id>.log that log shippers read.
package containerlogs

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// Policy is how container logs are rotated.
type Policy struct {
	// MaxSize is the size at which a log file is rotated.
	MaxSize int64
	// MaxFiles is how many files a container's log may have, the live one included.
	MaxFiles int
	// Workers is how many logs are rotated at once.
	Workers int
	// Interval is how often the logs' sizes are checked.
	Interval time.Duration
}

// PolicyOf reads the policy from the configuration's containerLog* fields, with the
// kubelet's defaults for unset ones. A bad value is an error naming its field.
func PolicyOf(kc *kubeletv1beta1.KubeletConfiguration) (Policy, error) {
	p := Policy{
		MaxFiles: int(ptr.Deref(kc.ContainerLogMaxFiles, 5)),
		Workers:  int(ptr.Deref(kc.ContainerLogMaxWorkers, 1)),
		Interval: 10 * time.Second,
	}
	if kc.ContainerLogMonitorInterval != nil {
		p.Interval = kc.ContainerLogMonitorInterval.Duration
	}
	size := kc.ContainerLogMaxSize
	if size == "" {
		size = "10Mi"
	}
	q, err := resource.ParseQuantity(size)
	if err != nil {
		return Policy{}, fmt.Errorf("containerLogMaxSize %q: %w", size, err)
	}
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return Policy{}, fmt.Errorf("containerLogMaxSize %q: must be a positive whole number of bytes such as 10Mi", size)
	}
	p.MaxSize = n
	switch {
	case p.MaxFiles < 2:
		return Policy{}, fmt.Errorf("containerLogMaxFiles %d: must be 2 or more", p.MaxFiles)
	case p.Workers < 1:
		return Policy{}, fmt.Errorf("containerLogMaxWorkers %d: must be 1 or more", p.Workers)
	case p.Interval < 3*time.Second:
		return Policy{}, fmt.Errorf("containerLogMonitorInterval %s: must be at least 3s", p.Interval)
	}
	return p, nil
}
