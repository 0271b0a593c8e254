package peercred_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/unitlet/unitlet/shared/peercred"
)

// TestRootOnlyMethodRefusesGroupMembers is the services' shape: the default rule admits
// root and the unitlet group, a method set to Root admits root alone. Membership, by the
// primary or a supplementary group, does not reach a root-only method; no group is
// needed for root.
func TestRootOnlyMethodRefusesGroupMembers(t *testing.T) {
	const (
		unitlet  = 4248
		open     = "/unitlet.podsync.v1.PodSyncService/ListPods"
		rootOnly = "/unitlet.podsync.v1.PodSyncService/KillPod"
	)
	a := peercred.NewAuthorizer(peercred.AnyOf(peercred.Root(), peercred.Group("unitlet", unitlet)))
	a.Allow(rootOnly, peercred.Root())
	for _, c := range []struct {
		name             string
		caller           peercred.AuthInfo
		open, rootAllows bool
	}{
		{"root", peercred.AuthInfo{UID: 0, GID: 0}, true, true},
		{"root in the group", peercred.AuthInfo{UID: 0, GID: 0, Groups: []uint32{unitlet}}, true, true},
		{"supplementary member", peercred.AuthInfo{UID: 1000, GID: 1000, Groups: []uint32{27, unitlet}}, true, false},
		{"primary member", peercred.AuthInfo{UID: 1000, GID: unitlet}, true, false},
		{"member with gid 0", peercred.AuthInfo{UID: 1000, GID: 0, Groups: []uint32{unitlet}}, true, false},
		{"outsider", peercred.AuthInfo{UID: 1000, GID: 1000, Groups: []uint32{27}}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: c.caller})
			for method, want := range map[string]bool{open: c.open, rootOnly: c.rootAllows} {
				err := a.Authorize(ctx, method)
				switch {
				case want && err != nil:
					t.Errorf("%s: refused: %v", method, err)
				case !want && status.Code(err) != codes.PermissionDenied:
					t.Errorf("%s: %v, want PermissionDenied", method, err)
				}
			}
		})
	}
	if err := a.Authorize(context.Background(), open); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a caller with no credentials: %v, want PermissionDenied", err)
	}
}
