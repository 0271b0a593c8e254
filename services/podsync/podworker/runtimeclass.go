package podworker

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
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

// podOptions are criOptions with the pod's user namespace (hostUsers: false), allocated
// on first use; the pod's sandbox and containers are made with them.
func (w *worker) podOptions(pod *corev1.Pod) (criconfig.Options, error) {
	o := w.criOptions(pod)
	if pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		return o, nil
	}
	handler, err := w.runtimeHandler(pod)
	if err != nil {
		return o, err
	}
	if w.m.o.UserNamespacesSupported == nil || !w.m.o.UserNamespacesSupported(handler) {
		if handler != "" {
			return o, fmt.Errorf("can't set `spec.hostUsers: false`, RuntimeClass handler %q does not support user namespaces", handler)
		}
		return o, errors.New("can't set `spec.hostUsers: false`, runtime does not support user namespaces")
	}
	if w.m.o.UserNamespaces == nil {
		return o, errors.New("can't set `spec.hostUsers: false`: the node has no range of IDs for user namespaces")
	}
	ns, err := w.m.o.UserNamespaces.Get(pod)
	if err != nil {
		return o, fmt.Errorf("user namespace: %w", err)
	}
	o.UserNamespace = ns
	return o, nil
}

// criOptions are the CRI settings for a container of pod: the node's, with whether the
// pod's runtime handler supports recursive read-only mounts.
func (w *worker) criOptions(pod *corev1.Pod) criconfig.Options {
	o := w.m.o.CRI
	if w.m.o.RecursiveReadOnly != nil {
		if handler, err := w.runtimeHandler(pod); err == nil {
			o.RecursiveReadOnly = w.m.o.RecursiveReadOnly(handler)
		}
	}
	return o
}
