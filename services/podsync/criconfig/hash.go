package criconfig

import (
	"encoding/json"
	"fmt"
	"hash/fnv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/dump"
)

// Hash is the kubelet-compatible hash of a container spec, recorded in the
// io.kubernetes.container.hash annotation. Like the kubelet (since 1.31) it covers the
// fields that may change in a running pod's container: name and image. A container
// created by the kubelet for the same spec carries the same hash.
func Hash(c *corev1.Container) uint64 {
	// json.Marshal orders map keys, so the encoding is stable; a map of strings
	// always encodes, so there is no error to handle.
	raw, _ := json.Marshal(map[string]string{"name": c.Name, "image": c.Image})
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(raw))
	return uint64(h.Sum32())
}
