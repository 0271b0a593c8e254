package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// LocalPathVersion is the local-path-provisioner the harness builds
// (integration/tools/local-path-provisioner).
const LocalPathVersion = "v0.0.30"

// LocalPathProvisioner runs rancher's local-path-provisioner beside the control plane, as
// clusters run it for node-local dynamic provisioning: the StorageClass local-path
// (WaitForFirstConsumer, reclaim Delete); a claim's volume is a directory under the
// stack's local-path directory on the node the scheduler picked, made (and removed) by a
// helper pod the provisioner runs on that node, here on unitlet. It acts as the stack's
// admin; its helper pods run as its service account in local-path-storage.
type LocalPathProvisioner struct{}

// LocalPathStorageClass is the StorageClass the harness's provisioner serves.
const LocalPathStorageClass = "local-path"

// EnsureLocalPathBinary builds local-path-provisioner from repo's
// integration/tools/local-path-provisioner into the cache unless it is there, and returns
// its path.
func EnsureLocalPathBinary(repo string, out io.Writer) (string, error) {
	bin := filepath.Join(CacheDir(), "local-path-provisioner-"+LocalPathVersion+"-r1", "local-path-provisioner")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := goBuild(out, filepath.Join(repo, "integration", "tools", "local-path-provisioner"), bin,
		[]string{"github.com/rancher/local-path-provisioner"}, "-s -w",
		"local-path-provisioner "+LocalPathVersion+" (first time: about a minute)"); err != nil {
		return "", err
	}
	return bin, nil
}

// LocalPathDir is where the provisioner makes its volumes' directories.
func (h *Harness) LocalPathDir() string { return filepath.Join(h.paths.root, "local-path") }

// applyLocalPath creates the provisioner's namespace, service account, configuration
// (its config.json, the helper pod, the set-up and teardown scripts) and StorageClass.
func (h *Harness) applyLocalPath(ctx context.Context) (string, error) {
	if err := os.MkdirAll(h.LocalPathDir(), 0o755); err != nil {
		return "", err
	}
	manifest := strings.ReplaceAll(localPathManifest, "@DIR@", h.LocalPathDir())
	if out, err := h.Kubectl(ctx, bytes.NewBufferString(manifest), "apply", "-f", "-"); err != nil {
		return "", fmt.Errorf("kubectl apply: %w: %s", err, out)
	}
	return " (volumes in " + h.LocalPathDir() + ")", nil
}

// localPathProvisioner is the provisioner's process.
func (h *Harness) localPathProvisioner() component {
	return component{
		name: "local-path-provisioner",
		start: func() (*proc, error) {
			bin, err := EnsureLocalPathBinary(h.repo, h.out)
			if err != nil {
				return nil, err
			}
			return startProcess(h.paths.logs, "local-path-provisioner", nil, bin, "start",
				"--kubeconfig="+h.AdminKubeconfig(), "--namespace=local-path-storage",
				"--configmap-name=local-path-config", "--service-account-name=local-path-provisioner",
				"--provisioner-name=rancher.io/local-path", "--helper-image="+localPathHelperImage)
		},
		// It serves no endpoint: up once it runs (a failure to start ends the process,
		// which the harness reports with its log).
		ready: func(context.Context) error { return nil },
	}
}

// The helper pods' image: the stack's busybox, which every node has.
const localPathHelperImage = "unitlet.local/busybox:1"

// localPathManifest is what the provisioner's own deployment creates, less its Deployment
// and RBAC (the process acts as the admin); @DIR@ is the stack's local-path directory.
const localPathManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: local-path-storage
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: local-path-provisioner
  namespace: local-path-storage
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-path
provisioner: rancher.io/local-path
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: local-path-config
  namespace: local-path-storage
data:
  config.json: |-
    {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["@DIR@"]}]}
  setup: |-
    #!/bin/sh
    set -eu
    mkdir -m 0777 -p "$VOL_DIR"
  teardown: |-
    #!/bin/sh
    set -eu
    rm -rf "$VOL_DIR"
  helperPod.yaml: |-
    apiVersion: v1
    kind: Pod
    metadata:
      name: helper-pod
    spec:
      automountServiceAccountToken: false
      containers:
      - name: helper-pod
        image: ` + localPathHelperImage + `
        imagePullPolicy: Never
`
