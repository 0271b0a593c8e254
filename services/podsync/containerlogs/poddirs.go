package containerlogs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// PodContent tells, as of the call, which pods' content on the node may go: the kubelet's
// ShouldPodContentBeRemoved (the Service's PodContentRemovable).
type PodContent func() func(uid types.UID) bool

// podUIDOfDir is the UID a pod log directory's name ends with
// (<namespace>_<name>_<uid>): its last "_"-separated part, as the kubelet reads it.
func podUIDOfDir(name string) types.UID {
	return types.UID(name[strings.LastIndex(name, "_")+1:])
}

// removePodDirs removes the directories in root (podLogsDir) of the pods whose content
// may go, as the kubelet's container garbage collection does. The directories are listed
// before content is asked: a pod whose directory is listed was known before the question.
// A directory that cannot be removed is an error; the others still go.
func removePodDirs(root string, content PodContent) (removed []string, err error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("list the pod log directories in %s: %w", root, err)
	}
	removable := content()
	var failed []string
	for _, e := range entries {
		if !removable(podUIDOfDir(e.Name())) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if err := os.RemoveAll(dir); err != nil {
			failed = append(failed, err.Error())
			continue
		}
		removed = append(removed, dir)
	}
	if len(failed) > 0 {
		return removed, fmt.Errorf("remove pod log directories: %s", strings.Join(failed, "; "))
	}
	return removed, nil
}
