// Package volumes is unitlet-volumes: pod volumes (emptyDir, hostPath, configMap, secret,
// downwardAPI, projected with service-account tokens) prepared before a pod's containers
// start and released after it terminates, their files kept current atomically.
package volumes
