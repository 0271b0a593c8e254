// Package kubeletconfig loads a node's KubeletConfiguration (kubelet.config.k8s.io/v1beta1)
// the way the kubelet does, with errors a person can act on.
//
// Inputs are applied in this order, each over the ones before it (so the later wins):
//
//  1. the kubelet's defaults (applied last, to fields nothing else set),
//  2. the --config file, YAML or JSON, strictly decoded,
//  3. the --config-dir drop-ins: every *.conf, in lexical order, as JSON merge patches,
//  4. UNITLET_* environment variables that set config fields,
//  5. command-line flags that set config fields.
//
// That is: flags > environment > drop-ins > file > defaults.
//
// Every error is one line naming the file (or the flags or variables) and the JSON field path.
package kubeletconfig
