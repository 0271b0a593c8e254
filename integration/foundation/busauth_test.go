package foundation

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	certsv1 "github.com/unitlet/unitlet/proto/unitlet/certs/v1"
	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
	"github.com/unitlet/unitlet/shared/bus"
)

// Environment of TestHelperBusCaller: the socket to call and the full methods to call on it.
const (
	busCallerEnv  = "UNITLET_TEST_BUS_CALLER_SOCKET"
	busMethodsEnv = "UNITLET_TEST_BUS_CALLER_METHODS"
)

// TestRootOnlyCallsRefuseUnitletGroupMembers runs the real unitlet-certs and
// unitlet-volumes under systemd-socket-activate as their units do (the bus socket group
// unitlet, mode 0660; the unitlet group known to the service, here through a private
// /etc/group in the service's own mount namespace, so the host needs no such group). A
// process running as another user (nobody) in the unitlet group lists certificates and
// volumes, and is refused by the service itself Rotate, PrepareVolumes and ReleaseVolumes,
// which are root's only; root reaches them.
func TestRootOnlyCallsRefuseUnitletGroupMembers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test runs a client as nobody in the unitlet group and needs root; run make test as root")
	}
	n := newNode(t)
	activate(t, n, freePort(t))
	getConfig(t, dial(t, n.socket()))
	groupFile, gid := unitletGroup(t, n)
	caller := filepath.Join(n.dir, "foundation.test")
	copyFile(t, os.Args[0], caller)
	member := &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{gid}}

	for _, c := range []struct {
		service           string
		desc              grpc.ServiceDesc
		rootOnly, readers []string
	}{
		{"certs", certsv1.CertsService_ServiceDesc, []string{"Rotate"}, []string{"ListCertificates", "WatchCertificates"}},
		{"volumes", volumesv1.VolumesService_ServiceDesc, []string{"PrepareVolumes", "ReleaseVolumes"}, []string{"ListVolumes"}},
	} {
		t.Run(c.service, func(t *testing.T) {
			for _, m := range methodNames(c.desc) {
				if !slices.Contains(c.rootOnly, m) && !slices.Contains(c.readers, m) {
					t.Errorf("%s/%s is neither root's only nor open to the unitlet group in this test: decide who may call it and list it here", c.desc.ServiceName, m)
				}
			}
			full := func(ms []string) []string {
				out := make([]string, len(ms))
				for i, m := range ms {
					out[i] = "/" + c.desc.ServiceName + "/" + m
				}
				return out
			}
			readers := append(full(c.readers), daemonv1.DaemonService_GetMetrics_FullMethodName)
			socket := activateInGroup(t, n, c.service, groupFile, gid)

			// Root's first call starts the service.
			for m, res := range callEach(socket, readers) {
				if res.code != codes.OK {
					t.Fatalf("%s by root: %s %q", m, res.code, res.message)
				}
			}
			got := callAs(t, caller, socket, member, append(full(c.rootOnly), readers...))
			for _, m := range full(c.rootOnly) {
				if got[m].code != codes.PermissionDenied || !strings.Contains(got[m].message, "allowed: root") {
					t.Errorf("%s by nobody in the unitlet group: %s %q, want PermissionDenied naming root as the only one allowed", m, got[m].code, got[m].message)
				}
			}
			for _, m := range readers {
				if got[m].code != codes.OK {
					t.Errorf("%s by nobody in the unitlet group: %s %q, want it answered", m, got[m].code, got[m].message)
				}
			}
			// Root reaches the handlers: the empty requests are refused for what they lack.
			for m, res := range callEach(socket, full(c.rootOnly)) {
				if res.code != codes.InvalidArgument {
					t.Errorf("%s by root with an empty request: %s %q, want InvalidArgument from the service", m, res.code, res.message)
				}
			}
		})
	}
}

// TestHelperBusCaller is the client TestRootOnlyCallsRefuseUnitletGroupMembers starts as
// another user; on its own it does nothing.
func TestHelperBusCaller(t *testing.T) {
	socket := os.Getenv(busCallerEnv)
	if socket == "" {
		return
	}
	for m, res := range callEach(socket, strings.Split(os.Getenv(busMethodsEnv), ",")) {
		fmt.Printf("CALL %s %d %q\n", m, res.code, res.message)
	}
}

func methodNames(desc grpc.ServiceDesc) []string {
	var names []string
	for _, m := range desc.Methods {
		names = append(names, m.MethodName)
	}
	for _, s := range desc.Streams {
		names = append(names, s.StreamName)
	}
	return names
}

// unitletGroup writes a copy of the host's /etc/group with a unitlet group added, at a gid
// the host does not use, for activateInGroup.
func unitletGroup(t *testing.T, n *node) (string, uint32) {
	t.Helper()
	hostGroups, err := os.ReadFile("/etc/group")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, line := range strings.Split(string(hostGroups), "\n") {
		if f := strings.Split(line, ":"); len(f) >= 3 {
			used[f[2]] = true
			if f[0] == "unitlet" {
				t.Logf("the host has a unitlet group (gid %s): the services see the test's instead", f[2])
			}
		}
	}
	gid := uint32(47000)
	for used[strconv.FormatUint(uint64(gid), 10)] {
		gid++
	}
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(string(hostGroups), "\n"), "\n") {
		if !strings.HasPrefix(line, "unitlet:") {
			b.WriteString(line + "\n")
		}
	}
	fmt.Fprintf(&b, "unitlet:x:%d:nobody\n", gid)
	path := filepath.Join(n.dir, "group")
	n.write(t, path, b.String())
	return path, gid
}

// activateInGroup runs unitlet-<service> under systemd-socket-activate in a mount namespace
// of its own where groupFile is /etc/group, and gives its bus socket the group gid and
// mode 0660, as unitlet-<service>.socket does (SocketGroup=unitlet, SocketMode=0660).
func activateInGroup(t *testing.T, n *node, service, groupFile string, gid uint32) string {
	t.Helper()
	socket := filepath.Join(n.socketDir, service+".sock")
	sa := tool(t, "systemd-socket-activate", "systemd")
	args := []string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", `mount --bind "$0" /etc/group && exec "$@"`, groupFile,
		sa, "-l", socket, "--fdname=grpc"}
	for _, e := range n.env() {
		args = append(args, "-E", e)
	}
	args = append(args, binary(t, "unitlet-"+service))
	p := start(t, tool(t, "unshare", "util-linux"), args, nil)
	waitSocket(t, p, socket)
	if err := os.Chown(socket, 0, int(gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(socket, 0o660); err != nil {
		t.Fatal(err)
	}
	return socket
}

type callResult struct {
	code    codes.Code
	message string
}

// callEach calls each full method on socket with an empty request, and says how the call
// ended: a unary call's status, or a server stream's first message (OK) or status.
func callEach(socket string, methods []string) map[string]callResult {
	out := map[string]callResult{}
	conn, err := bus.DialPath(socket)
	if err != nil {
		for _, m := range methods {
			out[m] = callResult{codes.Unavailable, err.Error()}
		}
		return out
	}
	defer conn.Close()
	for _, m := range methods {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
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
	cmd.Env = []string{"PATH=/usr/bin:/bin", busCallerEnv + "=" + socket, busMethodsEnv + "=" + strings.Join(methods, ",")}
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
