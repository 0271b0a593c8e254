package podworker

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// User namespaces (hostUsers: false), as the kubelet gives them: each such pod gets its
// own block of 65536 host IDs, mapped to 0-65535 in the pod, for users and groups alike.
// The blocks come from the kubelet user's subordinate IDs (/etc/subuid and /etc/subgid,
// which must agree), or, when the node has no user "kubelet", from 65536 up, as the
// kubelet takes them. A pod's block is checkpointed in <StateDir>/userns/<uid>.json (the
// kubelet's mappings file format) before its sandbox is made, read back by a restarted
// podsync, and not given to another pod until the pod is forgotten (its containers and
// sandbox removed).

// usernsLength is the IDs of one pod's user namespace (the kubelet's default idsPerPod,
// the only value unitlet-config accepts).
const usernsLength = 65536

// IDRange is a range of host IDs user namespaces are carved from.
type IDRange struct{ First, Length uint32 }

// KubeletIDRange is the kubelet's range of host IDs for user namespaces on this node:
// the subordinate IDs of the user "kubelet" in etc's subuid and subgid, or when there is
// no such user the kubelet's default, 65536 up to the last 32-bit ID.
func KubeletIDRange(etc string) (IDRange, error) {
	def := IDRange{First: usernsLength, Length: uint32((1 << 32) - uint64(usernsLength))}
	u, err := user.Lookup("kubelet")
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return def, nil
		}
		return IDRange{}, err
	}
	uids, err := subIDs(filepath.Join(etc, "subuid"), u)
	if err != nil {
		return IDRange{}, err
	}
	gids, err := subIDs(filepath.Join(etc, "subgid"), u)
	if err != nil {
		return IDRange{}, err
	}
	if uids != gids {
		return IDRange{}, fmt.Errorf("mismatched subuids and subgids for user %q: %v and %v", "kubelet", uids, gids)
	}
	switch {
	case uids.Length%usernsLength != 0:
		return IDRange{}, fmt.Errorf("kubelet user namespace length %d is not a multiple of %d", uids.Length, usernsLength)
	case uids.First%usernsLength != 0:
		return IDRange{}, fmt.Errorf("kubelet user assigned ID %d is not a multiple of %d", uids.First, usernsLength)
	case uids.First < usernsLength:
		return IDRange{}, fmt.Errorf("kubelet user assigned ID %d must be greater or equal to %d", uids.First, usernsLength)
	}
	return uids, nil
}

// subIDs is u's one range in file (name:first:count lines, by name or uid).
func subIDs(file string, u *user.User) (IDRange, error) {
	f, err := os.Open(file)
	if err != nil {
		return IDRange{}, fmt.Errorf("the subordinate IDs of user kubelet: %w", err)
	}
	defer f.Close()
	var found []IDRange
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		parts := strings.Split(strings.TrimSpace(lines.Text()), ":")
		if len(parts) != 3 || parts[0] != u.Username && parts[0] != u.Uid {
			continue
		}
		first, err1 := strconv.ParseUint(parts[1], 10, 32)
		count, err2 := strconv.ParseUint(parts[2], 10, 32)
		if err1 != nil || err2 != nil {
			return IDRange{}, fmt.Errorf("%s: malformed line %q", file, lines.Text())
		}
		found = append(found, IDRange{First: uint32(first), Length: uint32(count)})
	}
	if err := lines.Err(); err != nil {
		return IDRange{}, err
	}
	if len(found) != 1 {
		return IDRange{}, fmt.Errorf("%s: user kubelet has %d ranges of subordinate IDs, want exactly one (e.g. kubelet:65536:7208960)", file, len(found))
	}
	return found[0], nil
}

// UserNamespaces hands out the pods' user namespace mappings.
type UserNamespaces struct {
	dir     string // <StateDir>/userns
	ids     IDRange
	maxPods int

	mu     sync.Mutex
	loaded bool
	byPod  map[types.UID]uint32 // the pod's block: its first host ID
	used   map[uint32]types.UID
}

// NewUserNamespaces hands out user namespaces from ids, checkpointed under stateDir, for
// at most maxPods pods; the range must hold that many.
func NewUserNamespaces(stateDir string, ids IDRange, maxPods int) (*UserNamespaces, error) {
	if maxPods > 0 && uint64(ids.Length)/usernsLength < uint64(maxPods) {
		return nil, fmt.Errorf("the user namespace IDs %d-%d are not enough for maxPods %d pods of %d IDs each", ids.First, uint64(ids.First)+uint64(ids.Length)-1, maxPods, usernsLength)
	}
	return &UserNamespaces{dir: filepath.Join(stateDir, "userns"), ids: ids, maxPods: maxPods,
		byPod: map[types.UID]uint32{}, used: map[uint32]types.UID{}}, nil
}

// mappingsFile is the kubelet's userns file content.
type mappingsFile struct {
	UIDMappings []idMapping `json:"uidMappings"`
	GIDMappings []idMapping `json:"gidMappings"`
}

type idMapping struct {
	HostID      uint32 `json:"hostId"`
	ContainerID uint32 `json:"containerId"`
	Length      uint32 `json:"length"`
}

// loadLocked records the checkpointed blocks, once.
func (u *UserNamespaces) loadLocked() error {
	if u.loaded {
		return nil
	}
	entries, err := os.ReadDir(u.dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		uid, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		first, err := u.read(types.UID(uid))
		if err != nil {
			return err
		}
		u.byPod[types.UID(uid)], u.used[first] = first, types.UID(uid)
	}
	u.loaded = true
	return nil
}

// read is the first host ID of pod uid's checkpointed block, checked as the kubelet
// checks it.
func (u *UserNamespaces) read(uid types.UID) (uint32, error) {
	file := filepath.Join(u.dir, string(uid)+".json")
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	var m mappingsFile
	if err := json.Unmarshal(b, &m); err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	if len(m.UIDMappings) != 1 || len(m.GIDMappings) != 1 || m.UIDMappings[0] != m.GIDMappings[0] {
		return 0, fmt.Errorf("%s: want one mapping, the same for users and groups", file)
	}
	mp := m.UIDMappings[0]
	if mp.ContainerID != 0 || mp.Length != usernsLength || mp.HostID < u.ids.First || uint64(mp.HostID)+usernsLength > uint64(u.ids.First)+uint64(u.ids.Length) || (mp.HostID-u.ids.First)%usernsLength != 0 {
		return 0, fmt.Errorf("%s: mapping %+v is not a block of the node's range %d+%d", file, mp, u.ids.First, u.ids.Length)
	}
	return mp.HostID, nil
}

// Get is pod's user namespace: its block, allocated and checkpointed on first use.
func (u *UserNamespaces) Get(pod *corev1.Pod) (*runtimeapi.UserNamespace, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.loadLocked(); err != nil {
		return nil, fmt.Errorf("read the user namespace checkpoints: %w", err)
	}
	first, ok := u.byPod[pod.UID]
	if !ok {
		found := false
		for i := uint64(0); i+usernsLength <= uint64(u.ids.Length); i += usernsLength {
			if _, taken := u.used[u.ids.First+uint32(i)]; !taken {
				first, found = u.ids.First+uint32(i), true
				break
			}
		}
		if !found {
			return nil, errors.New("could not find an empty slot to allocate a user namespace")
		}
		if err := u.write(pod.UID, first); err != nil {
			return nil, fmt.Errorf("checkpoint the pod's user namespace: %w", err)
		}
		u.byPod[pod.UID], u.used[first] = first, pod.UID
	}
	m := []*runtimeapi.IDMapping{{HostId: first, ContainerId: 0, Length: usernsLength}}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m}, nil
}

// write checkpoints pod uid's block, durably.
func (u *UserNamespaces) write(uid types.UID, first uint32) error {
	mp := []idMapping{{HostID: first, ContainerID: 0, Length: usernsLength}}
	b, err := json.Marshal(mappingsFile{UIDMappings: mp, GIDMappings: mp})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(u.dir, 0o700); err != nil {
		return err
	}
	file := filepath.Join(u.dir, string(uid)+".json")
	f, err := os.CreateTemp(u.dir, ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(f.Name(), file); err != nil {
		return err
	}
	d, err := os.Open(u.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Release frees pod uid's block: the pod is forgotten, nothing of it runs.
func (u *UserNamespaces) Release(uid types.UID) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if first, ok := u.byPod[uid]; ok {
		delete(u.used, first)
		delete(u.byPod, uid)
	}
	_ = os.Remove(filepath.Join(u.dir, string(uid)+".json"))
}
