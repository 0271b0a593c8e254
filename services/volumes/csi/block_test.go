package csi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func blockPV(handle string) *corev1.PersistentVolume {
	pv := testPV(handle)
	pv.Spec.VolumeMode = ptrTo(corev1.PersistentVolumeBlock)
	return pv
}

func ptrTo[T any](v T) *T { return &v }

func blockPublication(m *Mounter, uid string, pv *corev1.PersistentVolume) Publication {
	return Publication{
		Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "ns", UID: types.UID(uid)}},
		PV:  pv, Dir: m.BlockLink(types.UID(uid), pv.Name),
	}
}

// A block volume is staged once with a block capability, published per pod as a device
// file at the kubelet's publish path, and the pod's link leads to it; set up again, no
// call; unpublished per pod, unstaged after the last, its directories and record gone.
func TestBlockStagedOncePublishedPerPodAsADevice(t *testing.T) {
	ctx := context.Background()
	m, node, _, root := newTestMounter(t, true)
	pv := blockPV("v1")
	a, b := blockPublication(m, "a", pv), blockPublication(m, "b", pv)
	for _, p := range []Publication{a, b} {
		got, err := m.SetUpBlock(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(root, "plugins/kubernetes.io/csi/volumeDevices/publish/pv-v1", string(p.Pod.UID))
		if to, err := os.Readlink(got); got != p.Dir || err != nil || to != want {
			t.Errorf("set-up of pod %s: %s → %s (%v), want %s → %s", p.Pod.UID, got, to, err, p.Dir, want)
		}
	}
	if got := node.take(); !slices.Equal(got, []string{"stage-block v1", "publish-block v1 a", "publish-block v1 b"}) {
		t.Errorf("set-up calls %q, want one block stage and a block publish per pod", got)
	}
	if _, err := readVolData(filepath.Join(root, "plugins/kubernetes.io/csi/volumeDevices/pv-v1/data")); err != nil {
		t.Errorf("the volume's record: %v", err)
	}
	if err := m.TearDownBlock(ctx, a.Dir); err != nil {
		t.Fatal(err)
	}
	if got := node.take(); !slices.Equal(got, []string{"unpublish v1"}) {
		t.Errorf("first teardown's calls %q, want an unpublish only", got)
	}
	if err := m.TearDownBlock(ctx, b.Dir); err != nil {
		t.Fatal(err)
	}
	if got := node.take(); !slices.Equal(got, []string{"unpublish v1", "unstage v1"}) {
		t.Errorf("last teardown's calls %q, want unpublish then unstage", got)
	}
	for _, p := range []string{a.Dir, b.Dir, m.blockStagingPath("pv-v1"), filepath.Dir(m.blockPublishPath("pv-v1", "a")), filepath.Dir(m.blockDataDir("pv-v1"))} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the teardowns: %v, want it gone", p, err)
		}
	}
}

// A restart after a pod's unpublish and before its volume's unstage: the orphan round
// unstages it and removes its record; a PV named like the node's block directories is
// refused.
func TestBlockOrphanUnstagedAndReservedNamesRefused(t *testing.T) {
	ctx := context.Background()
	m, node, _, _ := newTestMounter(t, true)
	p := blockPublication(m, "a", blockPV("v1"))
	if _, err := m.SetUpBlock(ctx, p); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{m.blockPublishPath("pv-v1", "a"), p.Dir} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	node.take()
	if err := m.UnstageOrphans(ctx); err != nil {
		t.Fatal(err)
	}
	if got := node.take(); !slices.Equal(got, []string{"unstage v1"}) {
		t.Errorf("UnstageOrphans' calls %q, want the block volume unstaged", got)
	}
	if recs, err := m.blockRecords(); err != nil || len(recs) != 0 {
		t.Errorf("block records after the orphan round: %v, %v; want none", recs, err)
	}
	bad := blockPV("v2")
	bad.Name = "staging"
	if _, err := m.SetUpBlock(ctx, blockPublication(m, "b", bad)); err == nil {
		t.Error("a block PV named staging was set up")
	}
}
