// Package kubeletconfig loads a node's KubeletConfiguration (kubelet.config.k8s.io/v1beta1)
// the way the kubelet v1.36 does, with errors a person can act on.
//
// Precedence, highest first: flags > environment > drop-ins > file > defaults. Load applies
// the inputs lowest first, each over the ones before it:
//
//  1. the kubelet's defaults, for every field nothing below sets;
//  2. the --config file, YAML or JSON, which must say apiVersion
//     kubelet.config.k8s.io/v1beta1 and kind KubeletConfiguration; its relative paths
//     (staticPodPath, tlsCertFile, authentication.x509.clientCAFile, ...) are taken
//     relative to the file's directory;
//  3. the --config-dir drop-ins: every *.conf directly in the directory, in lexical
//     order, each a KubeletConfiguration merged over the result so far as a JSON merge
//     patch (RFC 7386: maps merge key by key, lists are replaced, null removes);
//  4. UNITLET_* environment variables that set configuration fields, as merge patches;
//  5. command-line flags that set configuration fields, as merge patches.
//
// As in the kubelet, evictionHard is the one default settled on the file before the
// drop-ins: when the file sets none, the default thresholds are in place and a drop-in
// changes them signal by signal (null removes one); when the file sets some, only those
// apply, plus the missing defaults if mergeDefaultEvictionSettings is true.
//
// Decoding is strict everywhere: an unknown field (names are case-sensitive), a value of
// the wrong type, an invalid duration or quantity, or a field set twice is an error. Every
// error Load returns for bad input is an *Error: one line naming the file (or the
// variables or flags) that set the field and the field's JSON path, e.g.
//
//	/etc/unitlet/config.d/50-gc.conf: field imageGCLowThresholdPercent: Invalid value: 90: must be less than imageGCHighThresholdPercent (85)
package kubeletconfig
