package podsync

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/peercred"
)

// testUnitletGID stands for the unitlet group's gid in these tests; the host need not have
// the group.
const testUnitletGID = 4247

// busCallerEnv, set to a socket path, makes TestHelperBusCaller call the methods named in
// busMethodsEnv on it and print each one's status code.
const (
	busCallerEnv  = "UNITLET_TEST_BUS_CALLER_SOCKET"
	busMethodsEnv = "UNITLET_TEST_BUS_CALLER_METHODS"
)

// TestBusRootOnlyCallsRefuseUnitletGroupMembers serves podsync's bus API as Run wires it
// (serveBus on a daemon whose other methods admit root and the unitlet group) on a Unix
// socket of mode 0660 and group unitlet, as unitlet-podsync.socket makes it. A process
// running as another user in the unitlet group reads the pods and the runtime's health
// and is refused, by podsync's own check, every call that stops a pod, reaches into a
// container or removes images; root may make them.
func TestBusRootOnlyCallsRefuseUnitletGroupMembers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test starts a client as another user and needs root (run make test-unit as root)")
	}
	rootOnly := []string{"KillPod", "GetStreamingURL", "ReclaimDisk"}
	readers := []string{"ListPods", "ListPodsStream", "WatchPods", "GetRuntimeHealth"}
	svc := podsyncv1.PodSyncService_ServiceDesc.ServiceName
	var all []string
	for _, m := range podsyncv1.PodSyncService_ServiceDesc.Methods {
		all = append(all, m.MethodName)
	}
	for _, s := range podsyncv1.PodSyncService_ServiceDesc.Streams {
		all = append(all, s.StreamName)
	}
	for _, m := range all {
		if !slices.Contains(rootOnly, m) && !slices.Contains(readers, m) {
			t.Errorf("%s/%s is neither root's only nor open to the unitlet group in this test: decide who may call it (serveBus) and list it here", svc, m)
		}
	}

	f := newServiceFixture(t, 0)
	reclaims := &countingReclaimer{}
	d := daemon.New(daemon.Options{
		Service: ServiceName, Logger: slog.New(slog.DiscardHandler),
		// The default rule daemon.New makes, with the test's gid for the unitlet group.
		DefaultRule: peercred.AnyOf(peercred.Root(), peercred.Group(daemon.SocketGroup, testUnitletGID)),
	})
	serveBus(d, NewServer(f.s, okHealth{}, nil, reclaims))
	dir := sharedDir(t)
	socket := filepath.Join(dir, "podsync.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(socket, 0, testUnitletGID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(socket, 0o660); err != nil {
		t.Fatal(err)
	}
	go func() { _ = d.Server().Serve(l) }()
	t.Cleanup(d.Server().Stop)

	full := func(ms ...string) []string {
		out := make([]string, len(ms))
		for i, m := range ms {
			out[i] = "/" + svc + "/" + m
		}
		return out
	}
	metrics := daemonv1.DaemonService_GetMetrics_FullMethodName
	member := &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{testUnitletGID}}
	got := callAs(t, copyTestBinary(t, dir), socket, member, append(full(append(rootOnly, readers...)...), metrics))
	for _, m := range full(rootOnly...) {
		if got[m].code != codes.PermissionDenied || !strings.Contains(got[m].message, "allowed: root") {
			t.Errorf("%s by a member of the unitlet group (uid 65534): %s %q, want PermissionDenied naming root as the only one allowed", m, got[m].code, got[m].message)
		}
	}
	for _, m := range append(full(readers...), metrics) {
		if got[m].code != codes.OK {
			t.Errorf("%s by a member of the unitlet group (uid 65534): %s %q, want it answered", m, got[m].code, got[m].message)
		}
	}
	if n := reclaims.n.Load(); n != 0 {
		t.Errorf("the disk was reclaimed %d times for a refused caller", n)
	}

	// Root reaches the handlers: the empty requests are refused for what they lack, not
	// for who sent them.
	for m, res := range callEach(socket, full(rootOnly...)) {
		if res.code == codes.PermissionDenied || res.code == codes.Unavailable {
			t.Errorf("%s by root: %s %q, want the call to reach podsync", m, res.code, res.message)
		}
	}
	if n := reclaims.n.Load(); n != 1 {
		t.Errorf("ReclaimDisk by root reclaimed %d times, want once", n)
	}
}

// TestHelperBusCaller is the client TestBusRootOnlyCallsRefuseUnitletGroupMembers starts
// as another user; on its own it does nothing.
func TestHelperBusCaller(t *testing.T) {
	socket := os.Getenv(busCallerEnv)
	if socket == "" {
		return
	}
	for m, res := range callEach(socket, strings.Split(os.Getenv(busMethodsEnv), ",")) {
		fmt.Printf("CALL %s %d %q\n", m, res.code, res.message)
	}
}

type callResult struct {
	code    codes.Code
	message string
}

// callEach calls each full method on socket with an empty request, and says how the call
// ended: a unary call's status, or a server stream's first message (OK) or status.
func callEach(socket string, methods []string) map[string]callResult {
	out := map[string]callResult{}
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(peercred.NewCredentials()))
	if err != nil {
		for _, m := range methods {
			out[m] = callResult{codes.Unavailable, err.Error()}
		}
		return out
	}
	defer conn.Close()
	for _, m := range methods {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := func() error {
			s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, m)
			if err != nil {
				return err
			}
			if err := s.SendMsg(&emptypb.Empty{}); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			if err := s.CloseSend(); err != nil {
				return err
			}
			if err := s.RecvMsg(&emptypb.Empty{}); !errors.Is(err, io.EOF) {
				return err
			}
			return nil
		}()
		cancel()
		st := status.Convert(err)
		out[m] = callResult{st.Code(), st.Message()}
	}
	return out
}

// callAs runs bin's TestHelperBusCaller with cred and returns what each call came to.
func callAs(t *testing.T, bin, socket string, cred *syscall.Credential, methods []string) map[string]callResult {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^TestHelperBusCaller$")
	cmd.Env = append(os.Environ(), busCallerEnv+"="+socket, busMethodsEnv+"="+strings.Join(methods, ","))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("the client as uid %d gid %d groups %v: %v\n%s%s", cred.Uid, cred.Gid, cred.Groups, err, stdout, stderr.String())
	}
	got := map[string]callResult{}
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	for sc.Scan() {
		var m, msg string
		var code uint32
		if _, err := fmt.Sscanf(sc.Text(), "CALL %s %d %q", &m, &code, &msg); err == nil {
			got[m] = callResult{codes.Code(code), msg}
		}
	}
	for _, m := range methods {
		if _, ok := got[m]; !ok {
			t.Fatalf("the client as uid %d did not report %s:\n%s%s", cred.Uid, m, stdout, stderr.String())
		}
	}
	return got
}

// sharedDir is a temporary directory other users can reach.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// copyTestBinary copies this test binary into dir, where another user may run it (go test
// builds it in a directory only its owner reaches).
func copyTestBinary(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "podsync.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

type okHealth struct{}

func (okHealth) RuntimeHealth(context.Context) (*podsyncv1.RuntimeHealth, error) {
	return &podsyncv1.RuntimeHealth{RuntimeReady: true}, nil
}

// countingReclaimer counts the reclaims it is asked for.
type countingReclaimer struct{ n atomic.Int32 }

func (r *countingReclaimer) Reclaim(context.Context, bool) (Reclaimed, error) {
	r.n.Add(1)
	return Reclaimed{}, nil
}
