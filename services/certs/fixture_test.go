package certs

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/unitlet/unitlet/shared/kubeapi/adapt"
	"github.com/unitlet/unitlet/shared/nodeinfo"
	"github.com/unitlet/unitlet/shared/pki"
	"github.com/unitlet/unitlet/shared/pki/pkitest"
)

const testNode = "node-a"

// signer is how the fake cluster answers a CSR.
type signer int32

const (
	signAsAsked      signer = iota // approve and issue what was asked for, valid for a day
	signOtherKey                   // issue a certificate for another key
	signOtherSubject               // issue a certificate for another node
	signNothing                    // leave CSRs pending
)

// cluster is a fake API server whose CSRs get names and UIDs as in a real one, whose
// list and watch honour a metadata.name field selector, and whose signer approves and
// issues every pending CSR as told.
type cluster struct {
	*fake.Clientset
	how atomic.Int32
	// down makes every CSR creation fail as with an unreachable API server.
	down atomic.Bool
}

func newCluster(t *testing.T, ca *pkitest.CA) *cluster {
	c := &cluster{Clientset: pkitest.NewClientset()}
	c.PrependReactor("create", "certificatesigningrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
		if c.down.Load() {
			return true, nil, errors.New("dial tcp 192.0.2.10:6443: connect: connection refused")
		}
		return false, nil, nil
	})
	c.PrependReactor("list", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		la := a.(k8stesting.ListAction)
		name, ok := la.GetListRestrictions().Fields.RequiresExactMatch("metadata.name")
		if !ok {
			return false, nil, nil
		}
		obj, err := c.Tracker().List(la.GetResource(), certificatesv1.SchemeGroupVersion.WithKind("CertificateSigningRequest"), "")
		if err != nil {
			return true, nil, err
		}
		list := obj.(*certificatesv1.CertificateSigningRequestList)
		var keep []certificatesv1.CertificateSigningRequest
		for _, item := range list.Items {
			if item.Name == name {
				keep = append(keep, item)
			}
		}
		list.Items = keep
		return true, list, nil
	})
	c.PrependWatchReactor("certificatesigningrequests", func(a k8stesting.Action) (bool, watch.Interface, error) {
		wa := a.(k8stesting.WatchAction)
		w, err := c.Tracker().Watch(wa.GetResource(), "")
		if err != nil {
			return true, nil, err
		}
		name, ok := wa.GetWatchRestrictions().Fields.RequiresExactMatch("metadata.name")
		if !ok {
			return true, w, nil
		}
		return true, watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
			o, ok := ev.Object.(metav1.Object)
			return ev, ok && o.GetName() == name
		}), nil
	})
	ca.RunSigner(t, c, c.decide)
	return c
}

func (c *cluster) setSigner(s signer) { c.how.Store(int32(s)) }

// decide is the certificate the fake cluster issues for a CSR, valid for a day.
func (c *cluster) decide(cr *x509.CertificateRequest) (pkitest.Cert, bool) {
	in := pkitest.Requested(cr)
	in.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
	in.NotBefore, in.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(24*time.Hour)
	switch signer(c.how.Load()) {
	case signNothing:
		return in, false
	case signOtherKey:
		other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		in.PublicKey = other.Public()
	case signOtherSubject:
		in.Subject = pkix.Name{CommonName: "system:node:node-b", Organization: []string{"system:nodes"}}
	}
	return in, true
}

// csrs are the CSRs made so far.
func (c *cluster) csrs(t *testing.T) []certificatesv1.CertificateSigningRequest {
	t.Helper()
	list, err := c.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

type fixture struct {
	dir     string
	ca      *pkitest.CA
	cluster *cluster
	clock   *clocktesting.FakeClock
	reg     *prometheus.Registry
	opts    Options
	m       *Manager
	stop    func()
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ca := pkitest.NewCA(t)
	f := &fixture{dir: t.TempDir(), ca: ca, cluster: newCluster(t, ca), clock: clocktesting.NewFakeClock(time.Now())}
	f.opts = Options{
		CertDir: f.dir,
		Node:    nodeinfo.Identity{Name: testNode, Hostname: "host-a", IPs: []string{"192.0.2.7"}},
		Client:  adapt.Clientset(f.cluster),
		Clock:   f.clock,
		Random:  func() float64 { return 0.5 },
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	return f
}

// install puts a certificate for a new key in store, as bootstrap or an earlier rotation
// left it, and returns it. The certificate is for testNode unless in names a subject.
func (f *fixture) install(t *testing.T, store pki.Store, in pkitest.Cert) *x509.Certificate {
	t.Helper()
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	in.PublicKey = key.Public()
	if in.Subject.CommonName == "" {
		in.Subject = pkix.Name{CommonName: "system:node:" + testNode, Organization: []string{"system:nodes"}}
	}
	in.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
	if _, err := store.Update(f.ca.Sign(t, in), keyPEM, time.Now()); err != nil {
		t.Fatal(err)
	}
	cur, err := store.Current()
	if err != nil {
		t.Fatal(err)
	}
	return cur.Leaf
}

func (f *fixture) clientStore() pki.Store  { return pki.Store{Dir: f.dir, Prefix: pki.ClientPrefix} }
func (f *fixture) servingStore() pki.Store { return pki.Store{Dir: f.dir, Prefix: pki.ServerPrefix} }

// start runs a new manager (a fresh process of the service) until the test ends.
func (f *fixture) start(t *testing.T) *Manager {
	t.Helper()
	f.reg = prometheus.NewRegistry()
	f.opts.Metrics = newMetrics(f.reg)
	f.m = NewManager(f.opts)
	registerTTL(f.reg, f.m, f.clock.Now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.m.Run(ctx) }()
	var stopped bool
	f.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(f.stop)
	return f.m
}

// get is the manager's view of kind.
func (f *fixture) get(kind Kind) Certificate {
	for _, c := range f.m.List() {
		if c.Kind == kind {
			return c
		}
	}
	return Certificate{}
}

// waitFor polls until ok holds for kind's certificate, or fails the test after 10s.
func (f *fixture) waitFor(t *testing.T, kind Kind, what string, ok func(Certificate) bool) Certificate {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := f.get(kind)
		if ok(c) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s certificate: waited 10s for %s; now %+v", kind, what, c)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitIdle waits until every loop sleeps on the fake clock.
func (f *fixture) waitIdle(t *testing.T, loops int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.clock.Waiters() < loops {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d loops wait on the clock", f.clock.Waiters(), loops)
		}
		time.Sleep(time.Millisecond)
	}
}

func serial(c Certificate) string {
	if c.Leaf == nil {
		return ""
	}
	return c.Leaf.SerialNumber.String()
}
