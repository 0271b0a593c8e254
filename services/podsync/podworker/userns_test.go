package podworker

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

func usernsPod(uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}, Spec: corev1.PodSpec{HostUsers: ptr.To(false)}}
}

// Each pod gets its own block of 65536 IDs, the same for users and groups, mapped from 0;
// the same block again when asked again, and after a restart (the checkpoint); a block is
// given to another pod only once released; a full range refuses with the kubelet's words.
func TestUserNamespacesBlocks(t *testing.T) {
	dir := t.TempDir()
	ids := IDRange{First: 65536, Length: 2 * 65536}
	u, err := NewUserNamespaces(dir, ids, 2)
	if err != nil {
		t.Fatal(err)
	}
	a, err := u.Get(usernsPod("a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := u.Get(usernsPod("b"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Mode != runtimeapi.NamespaceMode_POD || a.Uids[0].HostId != 65536 || a.Uids[0].ContainerId != 0 || a.Uids[0].Length != 65536 || a.Gids[0].HostId != 65536 {
		t.Errorf("a: %v", a)
	}
	if b.Uids[0].HostId != 131072 {
		t.Errorf("b: %v, want the next block", b)
	}
	if _, err := u.Get(usernsPod("c")); err == nil || !strings.Contains(err.Error(), "could not find an empty slot to allocate a user namespace") {
		t.Errorf("a third pod in a range of two: %v", err)
	}
	again, _ := u.Get(usernsPod("a"))
	if again.Uids[0].HostId != 65536 {
		t.Errorf("a asked again: %v", again)
	}

	// A restarted podsync: the same blocks.
	u2, _ := NewUserNamespaces(dir, ids, 2)
	if got, _ := u2.Get(usernsPod("b")); got.Uids[0].HostId != 131072 {
		t.Errorf("b after a restart: %v", got)
	}
	u2.Release("a")
	if _, err := os.Stat(filepath.Join(dir, "userns", "a.json")); !os.IsNotExist(err) {
		t.Errorf("a's checkpoint after its release: %v", err)
	}
	if got, err := u2.Get(usernsPod("c")); err != nil || got.Uids[0].HostId != 65536 {
		t.Errorf("c after a's release: %v %v, want a's block", got, err)
	}

	if _, err := NewUserNamespaces(dir, ids, 3); err == nil {
		t.Errorf("a range of two blocks accepted for maxPods 3")
	}
	// A checkpoint outside the node's range is an error, not a mapping.
	os.WriteFile(filepath.Join(dir, "userns", "x.json"), []byte(`{"uidMappings":[{"hostId":0,"containerId":0,"length":65536}],"gidMappings":[{"hostId":0,"containerId":0,"length":65536}]}`), 0o600)
	u3, _ := NewUserNamespaces(dir, ids, 2)
	if _, err := u3.Get(usernsPod("d")); err == nil {
		t.Errorf("a checkpoint mapping host ID 0 was accepted")
	}
}

// The kubelet user's subordinate IDs, by name or uid; exactly one range.
func TestSubIDs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "subuid")
	u := &user.User{Username: "kubelet", Uid: "999"}
	for content, want := range map[string]string{
		"root:100000:65536\nkubelet:65536:7208960\n":  "{65536 7208960}",
		"999:131072:131072\n":                         "{131072 131072}",
		"root:100000:65536\n":                         "error",
		"kubelet:65536:65536\nkubelet:131072:65536\n": "error",
	} {
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := subIDs(file, u)
		s := fmt.Sprint(got)
		if err != nil {
			s = "error"
		}
		if s != want {
			t.Errorf("%q: %s (%v), want %s", content, s, err, want)
		}
	}
}

// A hostUsers: false pod's sandbox and containers get its user namespace, and its mounts
// the mappings; on a handler without support the sandbox fails, saying so.
func TestSandboxGetsTheUserNamespace(t *testing.T) {
	cri := newMemCRI("busybox:1")
	ns, err := NewUserNamespaces(t.TempDir(), IDRange{First: 65536, Length: 4 * 65536}, 4)
	if err != nil {
		t.Fatal(err)
	}
	var unsupported atomic.Bool
	h := newHarnessOpts(t, cri, func(o *Options) {
		o.UserNamespaces = ns
		o.UserNamespacesSupported = func(string) bool { return !unsupported.Load() }
	})
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	pod.Spec.HostUsers = ptr.To(false)
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })
	cri.mu.Lock()
	for _, sb := range cri.sandboxes {
		if u := sb.cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); u.GetMode() != runtimeapi.NamespaceMode_POD || u.GetUids()[0].GetHostId() != 65536 {
			t.Errorf("sandbox userns %v", u)
		}
	}
	for _, c := range cri.containers {
		if u := c.cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); u.GetMode() != runtimeapi.NamespaceMode_POD {
			t.Errorf("container userns %v", u)
		}
	}
	cri.mu.Unlock()

	unsupported.Store(true)
	other := syncPod(corev1.RestartPolicyAlways, nil, "other")
	other.Spec.HostUsers = ptr.To(false)
	h.m.Update(other, "api")
	const want = "FailedCreatePodSandBox: Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"
	deadline := time.Now().Add(10 * time.Second)
	for !h.ev.hasEvent(want) {
		if time.Now().After(deadline) {
			t.Fatalf("no event %q", want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
