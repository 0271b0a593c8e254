package volumes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/unitlet/unitlet/services/volumes/csi"
)

// fakeCSI publishes by making the target directory and records expansions.
type fakeCSI struct {
	expanded []int64
	err      error
	// setUps counts SetUp's calls; failSetUps is how many of the first fail.
	setUps, failSetUps int
}

func (f *fakeCSI) SetUp(_ context.Context, p csi.Publication) (string, error) {
	if f.setUps++; f.setUps <= f.failSetUps {
		return "", errors.New("the driver says no")
	}
	target := filepath.Join(p.Dir, "mount")
	return target, os.MkdirAll(target, 0o750)
}
func (f *fakeCSI) SetUpInline(context.Context, csi.InlinePublication) (string, error) {
	return "", nil
}

// SetUpBlock links the pod to /dev/null, a device every machine has.
func (f *fakeCSI) SetUpBlock(_ context.Context, p csi.Publication) (string, error) {
	if err := os.MkdirAll(filepath.Dir(p.Dir), 0o750); err != nil {
		return "", err
	}
	return p.Dir, os.Symlink("/dev/null", p.Dir)
}
func (f *fakeCSI) TearDownBlock(_ context.Context, link string) error { return os.Remove(link) }
func (f *fakeCSI) TearDown(_ context.Context, dir string) error       { return os.RemoveAll(dir) }
func (f *fakeCSI) UnstageOrphans(context.Context) error               { return nil }
func (f *fakeCSI) InUse() ([]string, error)                           { return nil, nil }
func (f *fakeCSI) NeedsRepublish(string) bool                         { return false }
func (f *fakeCSI) Stats(context.Context, string) (csi.VolumeStats, error) {
	return csi.VolumeStats{}, csi.ErrNoVolumeStats
}
func (f *fakeCSI) Expand(_ context.Context, _ string, _ *corev1.PersistentVolume, size int64) (int64, error) {
	if f.err != nil {
		return 0, f.err
	}
	f.expanded = append(f.expanded, size)
	return size, nil
}

// A claim whose controller expansion left NodeResizePending: the driver grows the file
// system to the PV's capacity, and the claim's status then has the new capacity, no
// resize status and no resize conditions. A claim with nothing pending is left alone.
func TestExpandClaimsFinishesPendingNodeExpansion(t *testing.T) {
	ctx := context.Background()
	m, f := newClaimsManager(t)
	fc := &fakeCSI{}
	m.csi = fc
	pv := f.bind("grow", "pv-grow", corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}, corev1.ReadWriteOnce)
	pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
	if _, err := m.Prepare(ctx, claimPod("uid-grow", "grow", false)); err != nil {
		t.Fatal(err)
	}
	m.ExpandClaims(ctx)
	if len(fc.expanded) != 0 {
		t.Fatalf("expanded %v with nothing pending", fc.expanded)
	}
	c := f.pvcs["default/grow"]
	c.ResourceVersion = "7"
	c.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	c.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: corev1.PersistentVolumeClaimNodeResizePending}
	c.Status.Conditions = []corev1.PersistentVolumeClaimCondition{
		{Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue},
		{Type: "Other", Status: corev1.ConditionTrue},
	}
	m.ExpandClaims(ctx)
	if len(fc.expanded) != 1 || fc.expanded[0] != 2<<30 {
		t.Fatalf("expansions %v, want one to 2Gi", fc.expanded)
	}
	got := f.pvcs["default/grow"].Status
	if q := got.Capacity[corev1.ResourceStorage]; q.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("claim capacity %s, want 2Gi", q.String())
	}
	if got.AllocatedResourceStatuses != nil {
		t.Errorf("resize status %v, want none", got.AllocatedResourceStatuses)
	}
	if len(got.Conditions) != 1 || got.Conditions[0].Type != "Other" {
		t.Errorf("conditions %+v, want the resize condition gone and the other kept", got.Conditions)
	}
	m.ExpandClaims(ctx)
	if len(fc.expanded) != 1 {
		t.Errorf("expanded again once finished: %v", fc.expanded)
	}
}
