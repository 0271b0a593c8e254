package podworker

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// RuntimeClasses resolve a pod's spec.runtimeClassName (node.k8s.io/v1 RuntimeClass) to
// the CRI runtime handler its sandbox runs on.
type RuntimeClasses interface {
	// Handler is the named RuntimeClass's handler. A class that does not exist gives the
	// API's NotFound error (`runtimeclass.node.k8s.io "<name>" not found`), the text the
	// kubelet's FailedCreatePodSandBox event carries.
	Handler(name string) (string, error)
}

// runtimeHandler is the runtime handler for pod's sandbox: "" (the runtime's default)
// without a runtimeClassName, else its RuntimeClass's handler. On a node without an API
// server (RuntimeClasses nil) a named class cannot be resolved and the pod does not run,
// rather than run on the default handler it did not ask for.
func (w *worker) runtimeHandler(pod *corev1.Pod) (string, error) {
	name := pod.Spec.RuntimeClassName
	if name == nil || *name == "" {
		return "", nil
	}
	if w.m.o.RuntimeClasses == nil {
		return "", fmt.Errorf("spec.runtimeClassName %q of pod %s/%s cannot be resolved: the node has no API server to read RuntimeClasses from", *name, pod.Namespace, pod.Name)
	}
	return w.m.o.RuntimeClasses.Handler(*name)
}
