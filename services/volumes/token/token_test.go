package token

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/unitlet/unitlet/shared/kubeapi/adapt"
)

// apiServer answers TokenRequests as the API server does, with its own clock.
type apiServer struct {
	clock *clocktesting.FakeClock

	mu       sync.Mutex
	requests []request
	// grant, when set, gives the lifetime granted for the one asked (the API server may
	// shorten it); it returns nil to leave expirationSeconds out of the answer.
	grant func(asked int64) *int64
	fail  error
	delay chan struct{} // when set, each request waits for it to be closed
}

type request struct {
	namespace, serviceAccount string
	spec                      authenticationv1.TokenRequestSpec
}

func (s *apiServer) react(action k8stesting.Action) (bool, runtime.Object, error) {
	create := action.(k8stesting.CreateAction)
	if create.GetSubresource() != "token" {
		return false, nil, nil
	}
	if s.delay != nil {
		<-s.delay
	}
	tr := create.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, request{
		namespace:      create.GetNamespace(),
		serviceAccount: create.(k8stesting.CreateActionImpl).Name,
		spec:           *tr.Spec.DeepCopy(),
	})
	if s.fail != nil {
		return true, nil, s.fail
	}
	granted := *tr.Spec.ExpirationSeconds
	tr.Spec.ExpirationSeconds = &granted
	if s.grant != nil {
		g := s.grant(granted)
		tr.Spec.ExpirationSeconds = g
		if g != nil {
			granted = *g
		} else {
			granted = 1800
		}
	}
	tr.Status = authenticationv1.TokenRequestStatus{
		Token:               fmt.Sprintf("token-%d", len(s.requests)),
		ExpirationTimestamp: metav1.NewTime(s.clock.Now().Add(time.Duration(granted) * time.Second)),
	}
	return true, tr, nil
}

func (s *apiServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

func (s *apiServer) last() request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[len(s.requests)-1]
}

func (s *apiServer) setFail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newTest(t *testing.T) (*Manager, *apiServer, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(start)
	srv := &apiServer{clock: clk}
	client := fake.NewClientset()
	client.PrependReactor("create", "serviceaccounts", srv.react)
	return NewManager(adapt.Clientset(client), clk), srv, clk
}

func testPod(uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-" + uid, UID: types.UID(uid)}}
}

func mustToken(t *testing.T, m *Manager, pod *corev1.Pod, audience string, exp int64) string {
	t.Helper()
	b, err := m.Token(context.Background(), pod, "sa", audience, exp)
	if err != nil {
		t.Fatalf("Token: %v", err)
	}
	return string(b)
}

func TestTokenRequestIsBoundToThePod(t *testing.T) {
	m, srv, _ := newTest(t)
	pod := testPod("u1")

	if got := mustToken(t, m, pod, "", 0); got != "token-1" {
		t.Fatalf("token %q, want token-1", got)
	}
	r := srv.last()
	if r.namespace != "ns" || r.serviceAccount != "sa" {
		t.Errorf("requested for %s/%s, want ns/sa", r.namespace, r.serviceAccount)
	}
	want := authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "pod-u1", UID: "u1"}
	if r.spec.BoundObjectRef == nil || *r.spec.BoundObjectRef != want {
		t.Errorf("boundObjectRef %+v, want %+v", r.spec.BoundObjectRef, want)
	}
	if r.spec.ExpirationSeconds == nil || *r.spec.ExpirationSeconds != 3607 {
		t.Errorf("expirationSeconds %v, want the default 3607", r.spec.ExpirationSeconds)
	}
	if len(r.spec.Audiences) != 0 {
		t.Errorf("audiences %v, want none (the API server's)", r.spec.Audiences)
	}

	mustToken(t, m, pod, "vault", 600)
	r = srv.last()
	if len(r.spec.Audiences) != 1 || r.spec.Audiences[0] != "vault" || *r.spec.ExpirationSeconds != 600 {
		t.Errorf("spec %+v, want audience vault and 600 s", r.spec)
	}
}

func TestTokenIsCachedPerKey(t *testing.T) {
	m, srv, _ := newTest(t)
	pod := testPod("u1")

	first := mustToken(t, m, pod, "", 0)
	if again := mustToken(t, m, pod, "", 3607); again != first || srv.count() != 1 {
		t.Fatalf("second call gave %q after %d requests, want the cached %q after 1", again, srv.count(), first)
	}
	// Each of audience, expiration, pod and service account makes another token.
	mustToken(t, m, pod, "other", 0)
	mustToken(t, m, pod, "", 7200)
	mustToken(t, m, testPod("u2"), "", 0)
	if _, err := m.Token(context.Background(), pod, "sa2", "", 0); err != nil {
		t.Fatal(err)
	}
	if srv.count() != 5 {
		t.Fatalf("%d requests, want 5", srv.count())
	}
	otherNS := testPod("u1")
	otherNS.Namespace = "ns2"
	mustToken(t, m, otherNS, "", 0)
	if srv.count() != 6 || srv.last().namespace != "ns2" {
		t.Fatalf("another namespace did not make a request in it: %d requests, last %+v", srv.count(), srv.last())
	}
}

func TestTokenIsACopy(t *testing.T) {
	m, _, _ := newTest(t)
	b, err := m.Token(context.Background(), testPod("u1"), "sa", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	b[0] = 'X'
	if got := mustToken(t, m, testPod("u1"), "", 0); got != "token-1" {
		t.Fatalf("cache changed through a returned slice: %q", got)
	}
}

func TestRefreshAtEightyPercent(t *testing.T) {
	m, srv, clk := newTest(t)
	pod := testPod("u1")
	mustToken(t, m, pod, "", 3600)
	if got, want := m.NextRefresh(pod.UID), start.Add(2880*time.Second); !got.Equal(want) {
		t.Fatalf("NextRefresh %v, want %v (80%% of 3600 s)", got, want)
	}

	clk.Step(2879 * time.Second)
	if got := mustToken(t, m, pod, "", 3600); got != "token-1" {
		t.Fatalf("at 79.97%% of its lifetime the token was refreshed: %q", got)
	}
	clk.Step(time.Second)
	if got := mustToken(t, m, pod, "", 3600); got != "token-2" {
		t.Fatalf("at 80%% of its lifetime: %q, want a new token", got)
	}
	if srv.count() != 2 {
		t.Fatalf("%d requests, want 2", srv.count())
	}
	if got, want := m.NextRefresh(pod.UID), clk.Now().Add(2880*time.Second); !got.Equal(want) {
		t.Fatalf("NextRefresh after refresh %v, want %v", got, want)
	}
}

func TestRefreshAfterADay(t *testing.T) {
	m, _, clk := newTest(t)
	pod := testPod("u1")
	week := int64(7 * 24 * 3600)
	mustToken(t, m, pod, "", week)
	if got, want := m.NextRefresh(pod.UID), start.Add(24*time.Hour); !got.Equal(want) {
		t.Fatalf("NextRefresh %v, want %v (24 h, before 80%% of a week)", got, want)
	}
	clk.Step(24*time.Hour - time.Second)
	if got := mustToken(t, m, pod, "", week); got != "token-1" {
		t.Fatalf("refreshed before a day: %q", got)
	}
	clk.Step(time.Second)
	if got := mustToken(t, m, pod, "", week); got != "token-2" {
		t.Fatalf("not refreshed after a day: %q", got)
	}
}

func TestRefreshFollowsTheGrantedLifetime(t *testing.T) {
	m, srv, _ := newTest(t)
	pod := testPod("u1")
	shortened := int64(3600)
	srv.grant = func(int64) *int64 { return &shortened }
	mustToken(t, m, pod, "", 86400)
	if got, want := m.NextRefresh(pod.UID), start.Add(2880*time.Second); !got.Equal(want) {
		t.Fatalf("NextRefresh %v, want %v (80%% of the 3600 s granted, not of the day asked)", got, want)
	}

	// Without expirationSeconds in the answer, the expiration timestamp tells (1800 s).
	m2, srv2, _ := newTest(t)
	srv2.grant = func(int64) *int64 { return nil }
	mustToken(t, m2, pod, "", 86400)
	if got, want := m2.NextRefresh(pod.UID), start.Add(1440*time.Second); !got.Equal(want) {
		t.Fatalf("NextRefresh %v, want %v (80%% of 1800 s to the expiration timestamp)", got, want)
	}
}

func TestFailedRefreshKeepsAValidToken(t *testing.T) {
	m, srv, clk := newTest(t)
	pod := testPod("u1")
	mustToken(t, m, pod, "", 3600)

	clk.Step(2900 * time.Second)
	srv.setFail(errors.New("apiserver down"))
	if got := mustToken(t, m, pod, "", 3600); got != "token-1" {
		t.Fatalf("failed refresh gave %q, want the cached token", got)
	}
	if got, want := m.NextRefresh(pod.UID), clk.Now().Add(retryInterval); !got.Equal(want) {
		t.Fatalf("NextRefresh after a failed refresh %v, want a retry at %v", got, want)
	}
	// Until the retry, no new request.
	n := srv.count()
	mustToken(t, m, pod, "", 3600)
	if srv.count() != n {
		t.Fatalf("retried before the retry interval")
	}

	clk.Step(700 * time.Second) // past expiry
	_, err := m.Token(context.Background(), pod, "sa", "", 3600)
	if err == nil {
		t.Fatal("expired token and failed refresh gave no error")
	}
	if !containsAll(err.Error(), "apiserver down", "expired") {
		t.Fatalf("error %q, want it to say expired and why", err)
	}

	srv.setFail(nil)
	if got := mustToken(t, m, pod, "", 3600); got == "token-1" {
		t.Fatal("recovered API server gave the expired token")
	}
}

func TestFirstRequestFails(t *testing.T) {
	m, srv, _ := newTest(t)
	pod := testPod("u1")
	srv.setFail(errors.New("forbidden"))
	_, err := m.Token(context.Background(), pod, "sa", "", 0)
	if err == nil || !containsAll(err.Error(), "forbidden", "ns/sa", "pod-u1") {
		t.Fatalf("error %v, want one naming the service account, the pod and the cause", err)
	}
	if got := m.NextRefresh(pod.UID); !got.IsZero() {
		t.Fatalf("NextRefresh %v after a failure, want zero (nothing cached)", got)
	}
}

func TestInvalidArguments(t *testing.T) {
	m, srv, _ := newTest(t)
	if _, err := m.Token(context.Background(), nil, "sa", "", 0); err == nil {
		t.Error("nil pod accepted")
	}
	if _, err := m.Token(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, "sa", "", 0); err == nil {
		t.Error("pod without uid accepted")
	}
	if _, err := m.Token(context.Background(), testPod("u1"), "", "", 0); err == nil {
		t.Error("empty service account accepted")
	}
	if srv.count() != 0 {
		t.Errorf("%d requests for invalid arguments", srv.count())
	}
}

func TestNextRefreshAndForget(t *testing.T) {
	m, srv, _ := newTest(t)
	pod, other := testPod("u1"), testPod("u2")
	if got := m.NextRefresh(pod.UID); !got.IsZero() {
		t.Fatalf("NextRefresh of an unknown pod %v, want zero", got)
	}
	mustToken(t, m, pod, "", 3600) // due at 2880 s
	mustToken(t, m, pod, "a", 600) // due at 480 s
	mustToken(t, m, other, "", 600)
	if got, want := m.NextRefresh(pod.UID), start.Add(480*time.Second); !got.Equal(want) {
		t.Fatalf("NextRefresh %v, want the earliest, %v", got, want)
	}

	m.Forget(pod.UID)
	if got := m.NextRefresh(pod.UID); !got.IsZero() {
		t.Fatalf("NextRefresh after Forget %v, want zero", got)
	}
	if got := m.NextRefresh(other.UID); got.IsZero() {
		t.Fatal("Forget dropped another pod's token")
	}
	n := srv.count()
	mustToken(t, m, pod, "", 3600)
	if srv.count() != n+1 {
		t.Fatal("Token after Forget did not request a new token")
	}
}

func TestTokensNoLongerAskedForAreForgotten(t *testing.T) {
	m, _, clk := newTest(t)
	pod := testPod("u1")
	mustToken(t, m, pod, "old", 600) // due at 480 s; the pod's spec then drops it
	mustToken(t, m, pod, "", 3600)   // due at 2880 s
	clk.Step(500 * time.Second)
	if got := m.NextRefresh(pod.UID); got.After(clk.Now()) {
		t.Fatalf("NextRefresh %v, want due now", got)
	}
	// The caller rewrites the pod's volumes, asking only for the current token.
	mustToken(t, m, pod, "", 3600)
	if got, want := m.NextRefresh(pod.UID), start.Add(2880*time.Second); !got.Equal(want) {
		t.Fatalf("NextRefresh %v, want %v once the unused token is forgotten", got, want)
	}

	// A token due and asked for again stays.
	clk.Step(2400 * time.Second)
	due := m.NextRefresh(pod.UID)
	if due.After(clk.Now()) {
		t.Fatalf("NextRefresh %v, want due", due)
	}
	mustToken(t, m, pod, "", 3600)
	if got := m.NextRefresh(pod.UID); !got.After(clk.Now()) {
		t.Fatalf("NextRefresh %v after the refresh, want in the future", got)
	}
}

func TestConcurrentCallsMakeOneRequest(t *testing.T) {
	m, srv, _ := newTest(t)
	srv.delay = make(chan struct{})
	pod := testPod("u1")
	var wg sync.WaitGroup
	tokens := make([]string, 8)
	errs := make([]error, 8)
	for i := range tokens {
		wg.Go(func() {
			b, err := m.Token(context.Background(), pod, "sa", "", 0)
			tokens[i], errs[i] = string(b), err
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(srv.delay)
	wg.Wait()
	for i := range tokens {
		if errs[i] != nil || tokens[i] != "token-1" {
			t.Fatalf("call %d: %q, %v; want token-1", i, tokens[i], errs[i])
		}
	}
	if srv.count() != 1 {
		t.Fatalf("%d requests, want 1", srv.count())
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
