package relist

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
)

// eventServer is a CRI runtime service on a Unix socket that answers GetContainerEvents
// as the test says: Unimplemented (containerd 1.6), or a stream the test feeds and breaks.
type eventServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	unimplemented bool
	streams       chan *eventStream
}

// eventStream is one open GetContainerEvents call.
type eventStream struct {
	events chan *runtimeapi.ContainerEventResponse
	broken chan error
}

func (s *eventServer) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream runtimeapi.RuntimeService_GetContainerEventsServer) error {
	if s.unimplemented {
		return status.Error(codes.Unimplemented, "unknown method GetContainerEvents for service runtime.v1.RuntimeService")
	}
	es := &eventStream{events: make(chan *runtimeapi.ContainerEventResponse), broken: make(chan error, 1)}
	select {
	case s.streams <- es:
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	for {
		select {
		case ev := <-es.events:
			if err := stream.Send(ev); err != nil {
				return err
			}
		case err := <-es.broken:
			return err
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// startEventServer serves s on a Unix socket and returns a client of it.
func startEventServer(t *testing.T, s *eventServer) EventSource {
	t.Helper()
	s.streams = make(chan *eventStream, 4)
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, s)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

// syncLog is a log the test reads while the relister writes it.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// changes records the relister's change reports.
type changes struct {
	mu   sync.Mutex
	uids [][]types.UID
}

func (c *changes) add(uids []types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uids = append(c.uids, slices.Clone(uids))
}

func (c *changes) has(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, u := range c.uids {
		if slices.Contains(u, uid) {
			return true
		}
	}
	return false
}

func (c *changes) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uids = nil
}

func (c *changes) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.uids)
}

// eventRelister is a relister on rt with a real clock, fast to settle a stream and to
// reconnect, following src until the test ends.
func eventRelister(t *testing.T, rt *memRuntime, src EventSource) (*Relister, *changes, *syncLog) {
	return eventRelisterSettling(t, rt, src, 50*time.Millisecond)
}

// eventRelisterSettling is eventRelister with a stream counting as open after settle.
func eventRelisterSettling(t *testing.T, rt *memRuntime, src EventSource, settle time.Duration) (*Relister, *changes, *syncLog) {
	t.Helper()
	ch, logs := &changes{}, &syncLog{}
	r := New(rt, time.Second, clock.RealClock{}, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(logs, nil)), ch.add)
	r.events.settle = settle
	r.events.backoff = wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Steps: 100, Cap: 100 * time.Millisecond}
	r.events.unimplementedRetry = 20 * time.Millisecond
	if err := r.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	ch.reset() // the first relist reports every pod
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.FollowEvents(ctx, src) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("FollowEvents: %v", err)
		}
	})
	return r, ch, logs
}

// event is a container event of pod uid as containerd sends it.
func event(typ runtimeapi.ContainerEventType, id, uid string, at time.Time) *runtimeapi.ContainerEventResponse {
	return &runtimeapi.ContainerEventResponse{
		ContainerId: id, ContainerEventType: typ, CreatedAt: at.UnixNano(),
		PodSandboxStatus: &runtimeapi.PodSandboxStatus{Id: "sb-" + uid, Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod-" + uid, Namespace: "ns", Uid: uid}},
	}
}

func send(t *testing.T, es *eventStream, ev *runtimeapi.ContainerEventResponse) {
	t.Helper()
	select {
	case es.events <- ev:
	case <-time.After(5 * time.Second):
		t.Fatal("the relister does not read the event stream")
	}
}

func nextStream(t *testing.T, s *eventServer) *eventStream {
	t.Helper()
	select {
	case es := <-s.streams:
		return es
	case <-time.After(5 * time.Second):
		t.Fatal("the relister opened no container events stream")
		return nil
	}
}

// liveRelister is eventRelister on a stream that is open and in use.
func liveRelister(t *testing.T, rt *memRuntime) (*Relister, *changes, *syncLog, *eventServer, *eventStream) {
	t.Helper()
	srv := &eventServer{}
	r, ch, logs := eventRelister(t, rt, startEventServer(t, srv))
	es := nextStream(t, srv)
	waitFor(t, r.EventsInUse)
	return r, ch, logs, srv, es
}

func onePod(uid string, st runtimeapi.ContainerState) *memRuntime {
	rt := newMemRuntime()
	rt.sandboxes = []*runtimeapi.PodSandbox{sandbox("sb-"+uid, uid, 10, 0, true)}
	rt.containers = []*runtimeapi.Container{container("c-"+uid, uid, "sb-"+uid, "app", 20, 0, st)}
	return rt
}

func drained(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// containerd 1.6 answers Unimplemented: podsync says so once and keeps relisting every
// second, asking again now and then.
func TestEventsUnimplementedKeepsRelistEverySecond(t *testing.T) {
	rt := onePod("a", running)
	// A stream settles after a second, as in production: on a loaded machine the answer
	// can take longer than the other tests' 50 ms (CI of stop 52 saw it).
	r, _, logs := eventRelisterSettling(t, rt, startEventServer(t, &eventServer{unimplemented: true}), time.Second)
	waitFor(t, func() bool { return testutil.ToFloat64(r.events.connErrors) >= 3 })
	if r.EventsInUse() || r.period() != time.Second {
		t.Errorf("events in use %v, relist period %s; want relisting every 1s", r.EventsInUse(), r.period())
	}
	if got := testutil.ToFloat64(r.events.connOK); got != 0 {
		t.Errorf("kubelet_evented_pleg_connection_success_count = %v, want 0", got)
	}
	if got := testutil.ToFloat64(r.events.inUseGauge); got != 0 {
		t.Errorf("unitlet_podsync_container_events_in_use = %v, want 0", got)
	}
	if n := strings.Count(logs.String(), "offers no container events"); n != 1 {
		t.Errorf("the log says %d times that the runtime offers no events, want once:\n%s", n, logs)
	}
	if strings.Contains(logs.String(), "following the container runtime's container events") {
		t.Errorf("the log says events are followed:\n%s", logs)
	}
}

// An event re-reads its pod and reports it changed at once, with no relist.
func TestEventWakesPodWithoutRelist(t *testing.T) {
	rt := onePod("a", running)
	r, ch, logs, _, es := liveRelister(t, rt)
	if r.period() != EventedInterval || testutil.ToFloat64(r.events.connOK) != 1 || testutil.ToFloat64(r.events.inUseGauge) != 1 {
		t.Errorf("period %s, connections %v, in use %v; want 30s, 1, 1", r.period(), testutil.ToFloat64(r.events.connOK), testutil.ToFloat64(r.events.inUseGauge))
	}
	if !drained(r.events.relistNow) {
		t.Error("going live asked for no relist: what changed before the stream opened would wait 30s")
	}
	rt.mu.Lock()
	lists := rt.ctrListCalls
	rt.mu.Unlock()

	rt.setState("c-a", exited)
	send(t, es, event(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, "c-a", "a", time.Now()))
	waitFor(t, func() bool { return ch.has("a") })
	if c := r.Pod("a").Latest("app"); c == nil || c.State != exited || c.ExitCode != 7 {
		t.Errorf("after the stop event the view has %+v, want the container exited with 7", c)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if sel := rt.listFilters[len(rt.listFilters)-1]; rt.ctrListCalls != lists+1 || len(sel) != 1 || sel[criconfig.LabelPodUID] != "a" {
		t.Errorf("container lists %d → %d, last filter %v; want one list of pod a only", lists, rt.ctrListCalls, rt.listFilters[len(rt.listFilters)-1])
	}
	if testutil.CollectAndCount(r.events.latency) != 1 {
		t.Error("kubelet_evented_pleg_connection_latency_seconds has no sample")
	}
	if !strings.Contains(logs.String(), "following the container runtime's container events") {
		t.Errorf("the log does not say events are followed:\n%s", logs)
	}
}

// An event of a pod the view does not know yet adds it; one the runtime cannot place
// (no sandbox status, a container the view does not know) asks for a relist.
func TestEventForUnknownPod(t *testing.T) {
	rt := onePod("a", running)
	r, ch, _, _, es := liveRelister(t, rt)
	drained(r.events.relistNow)

	rt.mu.Lock()
	rt.sandboxes = append(rt.sandboxes, sandbox("sb-b", "b", 30, 0, true))
	rt.containers = append(rt.containers, container("c-b", "b", "sb-b", "app", 40, 0, running))
	rt.mu.Unlock()
	send(t, es, event(runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, "c-b", "b", time.Now()))
	waitFor(t, func() bool { return ch.has("b") })
	if c := r.Pod("b").Latest("app"); c == nil || !c.Running() || len(r.Pod("b").Sandboxes) != 1 {
		t.Errorf("pod b in the view: %+v", r.Pod("b"))
	}

	n := ch.count()
	send(t, es, &runtimeapi.ContainerEventResponse{ContainerId: "nobody", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, CreatedAt: time.Now().UnixNano()})
	waitFor(t, func() bool { return drained(r.events.relistNow) })
	if ch.count() != n {
		t.Errorf("an event of no known pod reported changes: %v", ch.uids)
	}

	// Without a sandbox status, a container the view knows is placed by the view.
	rt.setState("c-a", exited)
	send(t, es, &runtimeapi.ContainerEventResponse{ContainerId: "c-a", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, CreatedAt: time.Now().UnixNano()})
	waitFor(t, func() bool { return ch.has("a") })
}

// A broken stream falls back to the relist every second at once, then reconnects.
func TestEventsStreamBreakFallsBackAndReconnects(t *testing.T) {
	rt := onePod("a", running)
	r, ch, logs, srv, es := liveRelister(t, rt)
	drained(r.events.relistNow)

	es.broken <- status.Error(codes.Unavailable, "containerd is restarting")
	waitFor(t, func() bool { return !r.EventsInUse() })
	if r.period() != time.Second || testutil.ToFloat64(r.events.connErrors) != 1 || testutil.ToFloat64(r.events.inUseGauge) != 0 {
		t.Errorf("after the break: period %s, errors %v, in use %v; want 1s, 1, 0", r.period(), testutil.ToFloat64(r.events.connErrors), testutil.ToFloat64(r.events.inUseGauge))
	}
	if !drained(r.events.relistNow) {
		t.Error("the fallback asked for no relist at once")
	}
	if !strings.Contains(logs.String(), "container events stream broke") {
		t.Errorf("the log does not say the stream broke:\n%s", logs)
	}

	es = nextStream(t, srv)
	waitFor(t, r.EventsInUse)
	if got := testutil.ToFloat64(r.events.connOK); got != 2 {
		t.Errorf("kubelet_evented_pleg_connection_success_count = %v, want 2", got)
	}
	rt.setState("c-a", exited)
	send(t, es, event(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, "c-a", "a", time.Now()))
	waitFor(t, func() bool { return ch.has("a") })
}

// A STARTED event that arrives after the STOPPED of the same container does not bring
// the container back: the pod is read as the runtime has it.
func TestLateStartedEventDoesNotResurrect(t *testing.T) {
	rt := onePod("a", running)
	rt.sandboxes = append(rt.sandboxes, sandbox("sb-z", "z", 10, 0, true))
	r, ch, _, _, es := liveRelister(t, rt)

	started := time.Now()
	rt.setState("c-a", exited)
	send(t, es, event(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, "c-a", "a", started.Add(time.Second)))
	send(t, es, event(runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, "c-a", "a", started))
	// Events are handled in order: once pod z's is, both of a's are.
	rt.mu.Lock()
	rt.containers = append(rt.containers, container("c-z", "z", "sb-z", "app", 20, 0, running))
	rt.mu.Unlock()
	send(t, es, event(runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, "c-z", "z", started))
	waitFor(t, func() bool { return ch.has("z") })
	if c := r.Pod("a").Latest("app"); c == nil || c.State != exited {
		t.Errorf("after STOPPED then a late STARTED the view has %+v, want the container exited", c)
	}
}

// A relist that began before an event's read does not overwrite the newer view of the
// pod, nor report it changed again.
func TestSlowRelistKeepsNewerEventRead(t *testing.T) {
	rt := onePod("a", running)
	ch := &changes{}
	r := New(rt, time.Second, clocktesting.NewFakeClock(time.Unix(1000, 0)), nil, quietLog(), ch.add)
	ctx := context.Background()
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	ch.reset()
	listed, release := make(chan struct{}), make(chan struct{})
	rt.mu.Lock()
	rt.listedHook = func(sel map[string]string) {
		if len(sel) == 0 { // the full relist: hold it with what it listed
			close(listed)
			<-release
		}
	}
	rt.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- r.Relist(ctx) }()
	<-listed // the relist has the container running

	rt.setState("c-a", exited)
	if changed, err := r.refresh(ctx, "a"); err != nil || !changed {
		t.Fatalf("refresh after the exit: changed %v, %v", changed, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c := r.Pod("a").Latest("app"); c == nil || c.State != exited {
		t.Errorf("the slow relist put back %+v, want the exited container of the newer read", c)
	}
	if ch.count() != 0 {
		t.Errorf("changes reported %v, want none (refresh reports to its caller)", ch.uids)
	}

	// The next relist begins after the read: it sets the pod again.
	rt.mu.Lock()
	rt.listedHook = nil
	rt.mu.Unlock()
	rt.setState("c-a", running)
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	if c := r.Pod("a").Latest("app"); c == nil || !c.Running() || !ch.has("a") {
		t.Errorf("a later relist: %+v, changes %v; want the container running and a reported", c, ch.uids)
	}
}

// While events are followed the relist runs every 30 s, not every second; a switch relists
// at once.
func TestRunSlowsWhileEventsAreFollowed(t *testing.T) {
	rt := newMemRuntime()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	r := New(rt, time.Second, clk, nil, quietLog(), nil)
	lists := func() int {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return rt.ctrListCalls
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, func() bool { return lists() == 1 && clk.HasWaiters() })

	r.setEventsInUse(true)
	waitFor(t, func() bool { return lists() == 2 && clk.HasWaiters() })
	clk.Step(time.Second)
	time.Sleep(50 * time.Millisecond)
	if n := lists(); n != 2 {
		t.Errorf("%d relists 1s into following events, want none more", n-2)
	}
	clk.Step(EventedInterval - time.Second)
	waitFor(t, func() bool { return lists() == 3 && clk.HasWaiters() })

	r.setEventsInUse(false)
	waitFor(t, func() bool { return lists() == 4 && clk.HasWaiters() })
	clk.Step(time.Second)
	waitFor(t, func() bool { return lists() == 5 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
