package peercred_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/unitlet/unitlet/shared/peercred"
)

// helperSocket, when set, makes the test binary a client that calls Check on the socket
// it names and exits 0 when admitted: a process whose groups the test chose.
const helperSocket = "PEERCRED_TEST_CALL"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperSocket); path != "" {
		os.Exit(callAsHelper(path))
	}
	os.Exit(m.Run())
}

func callAsHelper(path string) int {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(peercred.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// callWithGroups runs the helper with primary gid 0 and the given supplementary groups.
func callWithGroups(t *testing.T, path string, groups ...uint32) error {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: it starts a client with supplementary groups of its choosing (run make test-unit as root)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperSocket+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: groups}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// A supplementary group admits a caller as the kernel recorded it on the connection: the
// caller's PID plays no part.
func TestGroupFromTheConnection(t *testing.T) {
	const gid = 4242
	path, seen := serveAt(t, peercred.NewAuthorizer(peercred.Group("operators", gid)))
	if err := callWithGroups(t, path, 7, gid); err != nil {
		t.Fatalf("a member of gid %d (a supplementary group) was refused: %v", gid, err)
	}
	if g := seen().Groups; len(g) != 2 || g[0] != 7 || g[1] != gid {
		t.Errorf("the server saw supplementary groups %v, want [7 %d]", g, gid)
	}
	err := callWithGroups(t, path, 7)
	if err == nil || !strings.Contains(err.Error(), "PermissionDenied") || !strings.Contains(err.Error(), "group operators") {
		t.Fatalf("a caller outside gid %d: %v, want PermissionDenied naming the rule", gid, err)
	}
}
