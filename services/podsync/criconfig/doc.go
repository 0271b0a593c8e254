// Package criconfig turns a pod and its containers into the CRI (k8s.io/cri-api runtime/v1)
// configurations the runtime needs to create a sandbox and its containers, the way the
// kubelet builds them: labels and annotations, hostname and DNS, port mappings, cgroup
// parent, namespaces, security contexts, Linux resources, environment with $(VAR)
// expansion and service-link variables, the termination-message mount and the pod's
// managed /etc/hosts content.
//
// Everything here is a pure function of its arguments, apart from reading the resolv.conf
// named in Options and the ConfigMaps and Secrets the caller's Objects hand back. Nothing
// here calls the runtime.
package criconfig
