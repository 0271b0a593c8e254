package certs

import (
	"context"
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/unitlet/unitlet/shared/pki/pkitest"
)

func TestRotatesTheClientCertificateAtItsDeadline(t *testing.T) {
	f := newFixture(t)
	now := f.clock.Now()
	old := f.install(t, f.clientStore(), pkitest.Cert{NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour)})
	f.start(t)

	deadline := rotationDeadline(old, 0.5)
	c := f.waitFor(t, KindClient, "valid", func(c Certificate) bool { return c.State == "valid" })
	if !c.NextRotation.Equal(deadline) || serial(c) != old.SerialNumber.String() {
		t.Fatalf("before the deadline: next rotation %s (want %s), serial %s", c.NextRotation, deadline, serial(c))
	}
	f.waitIdle(t, 2)
	f.clock.SetTime(deadline.Add(-time.Second))
	f.waitIdle(t, 2)
	if n := len(f.cluster.csrs(t)); n != 0 {
		t.Fatalf("%d CSRs before the deadline", n)
	}

	f.clock.SetTime(deadline)
	c = f.waitFor(t, KindClient, "a new certificate", func(c Certificate) bool {
		return serial(c) != old.SerialNumber.String() && c.State == "valid"
	})
	cur, err := f.clientStore().Current()
	if err != nil || cur.Leaf.SerialNumber.String() != serial(c) {
		t.Fatalf("store's current certificate: %v, %v", cur, err)
	}
	if cur.Leaf.Subject.CommonName != "system:node:"+testNode || c.Failures != 0 || c.NextRotation.Before(cur.Leaf.NotBefore.Add(16*time.Hour)) {
		t.Fatalf("after the rotation: %+v", c)
	}
	csrs := f.cluster.csrs(t)
	if len(csrs) != 1 || csrs[0].Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
		t.Fatalf("CSRs: %+v", csrs)
	}
	if got := testutil.ToFloat64(f.opts.Metrics.rotations.WithLabelValues("client")); got != 1 {
		t.Errorf("unitlet_certs_rotations_total{kind=client} = %v", got)
	}
	fi, err := os.Stat(f.clientStore().CurrentPath())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("new certificate file: %v, %v", fi, err)
	}
}

func TestRefusesACertificateForAnotherKeyOrSubjectAndBacksOff(t *testing.T) {
	for _, how := range []signer{signOtherKey, signOtherSubject} {
		t.Run(map[signer]string{signOtherKey: "other key", signOtherSubject: "other subject"}[how], func(t *testing.T) {
			f := newFixture(t)
			f.cluster.setSigner(how)
			now := f.clock.Now()
			// Past its deadline already: rotated at once.
			old := f.install(t, f.clientStore(), pkitest.Cert{NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(10 * time.Minute)})
			f.start(t)

			c := f.waitFor(t, KindClient, "a failed attempt", func(c Certificate) bool { return c.Failures == 1 })
			if !strings.HasPrefix(c.State, "rotation failed (attempt 1, retry at ") {
				t.Fatalf("state %q", c.State)
			}
			if wait := c.NextRotation.Sub(f.clock.Now()); wait < time.Second || wait > 2*time.Second {
				t.Fatalf("first retry in %s, want 1-2s", wait)
			}
			if serial(c) != old.SerialNumber.String() {
				t.Fatalf("the refused certificate was installed")
			}
			if cur, err := f.clientStore().Current(); err != nil || !cur.Leaf.Equal(old) {
				t.Fatalf("current certificate changed: %v", err)
			}
			if got := testutil.ToFloat64(f.opts.Metrics.clientRenewErrors); got != 1 {
				t.Fatalf("renew errors = %v", got)
			}

			// No second CSR before the backoff is over.
			f.waitIdle(t, 2)
			f.clock.Step(900 * time.Millisecond)
			f.waitIdle(t, 2)
			if n := len(f.cluster.csrs(t)); n != 1 {
				t.Fatalf("%d CSRs during the backoff", n)
			}
			f.clock.SetTime(c.NextRotation)
			c = f.waitFor(t, KindClient, "a second failed attempt", func(c Certificate) bool { return c.Failures == 2 })
			if wait := c.NextRotation.Sub(f.clock.Now()); wait < 2*time.Second || wait > 4*time.Second {
				t.Fatalf("second retry in %s, want 2-4s", wait)
			}
			if got := testutil.ToFloat64(f.opts.Metrics.clientRenewErrors); got != 2 {
				t.Fatalf("renew errors = %v", got)
			}

			// A signer that behaves again: the next attempt installs.
			f.cluster.setSigner(signAsAsked)
			f.waitIdle(t, 2)
			f.clock.SetTime(c.NextRotation)
			c = f.waitFor(t, KindClient, "a rotation", func(c Certificate) bool { return c.State == "valid" && c.Failures == 0 })
			if serial(c) == old.SerialNumber.String() {
				t.Fatal("not rotated")
			}
		})
	}
}

func TestUnreachableAPIServerIsAStateNotIllHealth(t *testing.T) {
	f := newFixture(t)
	f.cluster.down.Store(true)
	now := f.clock.Now()
	f.install(t, f.clientStore(), pkitest.Cert{NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(10 * time.Minute)})
	m := f.start(t)
	c := f.waitFor(t, KindClient, "a failed attempt", func(c Certificate) bool { return c.Failures == 1 })
	if !strings.Contains(c.State, "connection refused") {
		t.Fatalf("state %q", c.State)
	}
	if err := m.Healthy(context.Background()); err != nil {
		t.Fatalf("Healthy while the API server is down: %v", err)
	}
}

func TestHealthFailsWhenALoopIsStuck(t *testing.T) {
	f := newFixture(t)
	f.opts.Metrics = nil
	m := NewManager(f.opts) // not running: its loops never come round
	if err := m.Healthy(context.Background()); err != nil {
		t.Fatalf("Healthy at start: %v", err)
	}
	f.clock.Step(attemptTimeout + 3*recheckEvery)
	if err := m.Healthy(context.Background()); err == nil || !strings.Contains(err.Error(), "has not come round") {
		t.Fatalf("Healthy with stuck loops: %v", err)
	}
}

func TestForcedRotationSurvivesARestart(t *testing.T) {
	f := newFixture(t)
	now := f.clock.Now()
	old := f.install(t, f.clientStore(), pkitest.Cert{NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour)})
	// A Rotate call whose process was killed before the new certificate was installed.
	marker := filepath.Join(f.dir, ".rotate-client")
	if err := os.WriteFile(marker, []byte("rotation requested\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	c := f.waitFor(t, KindClient, "a new certificate", func(c Certificate) bool {
		return c.State == "valid" && serial(c) != old.SerialNumber.String()
	})
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("marker after the rotation: %v", err)
	}
	f.waitIdle(t, 2)
	if n := len(f.cluster.csrs(t)); n != 1 || serial(f.get(KindClient)) != serial(c) {
		t.Fatalf("%d CSRs: rotated more than once", n)
	}
}

func TestRotateBlocksUntilTheNewCertificateIsInstalled(t *testing.T) {
	f := newFixture(t)
	now := f.clock.Now()
	old := f.install(t, f.clientStore(), pkitest.Cert{NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour)})
	m := f.start(t)
	f.waitFor(t, KindClient, "valid", func(c Certificate) bool { return c.State == "valid" })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := m.Rotate(ctx, KindClient)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := f.clientStore().Current()
	if err != nil || serial(c) == old.SerialNumber.String() || cur.Leaf.SerialNumber.String() != serial(c) {
		t.Fatalf("Rotate returned %s, store has %v (%v), old %s", serial(c), cur, err, old.SerialNumber)
	}
	if _, err := os.Stat(filepath.Join(f.dir, ".rotate-client")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("marker after Rotate: %v", err)
	}

	// Pending CSRs: Rotate waits and gives up with its context, the rotation goes on.
	f.cluster.setSigner(signNothing)
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	if _, err := m.Rotate(short, KindClient); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Rotate with nobody approving: %v", err)
	}
	st := f.waitFor(t, KindClient, "a pending CSR", func(c Certificate) bool { return strings.Contains(c.State, "waiting for approval") })
	if !strings.HasPrefix(st.State, "rotating: submitted CSR csr-") {
		t.Fatalf("state %q", st.State)
	}
	f.cluster.setSigner(signAsAsked)
	f.waitFor(t, KindClient, "the forced rotation done", func(c Certificate) bool { return c.State == "valid" && serial(c) != serial(st) })

	if _, err := m.Rotate(ctx, KindServing); !errors.Is(err, ErrNotRotating) {
		t.Fatalf("Rotate of a serving certificate while serverTLSBootstrap is off: %v", err)
	}
}

func TestClientCertificateNotBootstrappedIsWaitedFor(t *testing.T) {
	f := newFixture(t)
	m := f.start(t)
	c := f.waitFor(t, KindClient, "not bootstrapped", func(c Certificate) bool { return strings.HasPrefix(c.State, "not bootstrapped yet") })
	if c.Leaf != nil || !c.NextRotation.IsZero() {
		t.Fatalf("%+v", c)
	}
	if _, err := m.Rotate(context.Background(), KindClient); !errors.Is(err, ErrNotRotating) {
		t.Fatalf("Rotate before bootstrap: %v", err)
	}
	if got := gauge(t, f, "kubelet_certificate_manager_client_ttl_seconds"); !math.IsInf(got, 1) {
		t.Fatalf("client TTL without a certificate = %v, want +Inf", got)
	}

	// unitlet-config bootstraps: picked up on the next look.
	now := f.clock.Now()
	leaf := f.install(t, f.clientStore(), pkitest.Cert{NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour)})
	f.waitIdle(t, 2)
	f.clock.Step(recheckEvery)
	f.waitFor(t, KindClient, "valid", func(c Certificate) bool { return c.State == "valid" && serial(c) == leaf.SerialNumber.String() })
	if n := len(f.cluster.csrs(t)); n != 0 {
		t.Fatalf("%d CSRs", n)
	}
	if got := gauge(t, f, "kubelet_certificate_manager_client_ttl_seconds"); got < 3500 || got > 3600 {
		t.Fatalf("client TTL = %v, want about 3600", got)
	}
}

func TestKubeconfigWithOtherCredentialsIsNotRotated(t *testing.T) {
	f := newFixture(t)
	f.opts.ClientCredentials = "the kubeconfig carries its client certificate inline"
	m := f.start(t)
	c := f.waitFor(t, KindClient, "the reason", func(c Certificate) bool { return strings.Contains(c.State, "inline") })
	if !strings.Contains(c.State, "administrator") {
		t.Fatalf("state %q", c.State)
	}
	if _, err := m.Rotate(context.Background(), KindClient); !errors.Is(err, ErrNotRotating) {
		t.Fatalf("Rotate: %v", err)
	}
}

func TestServingCertificateRequestedWhenMissingAndWhenAddressesChange(t *testing.T) {
	f := newFixture(t)
	f.opts.Serving = true
	now := f.clock.Now()
	f.install(t, f.clientStore(), pkitest.Cert{NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour)})
	f.start(t)
	c := f.waitFor(t, KindServing, "a serving certificate", func(c Certificate) bool { return c.State == "valid" && c.Leaf != nil })
	if !slices.Equal(c.Leaf.DNSNames, []string{"host-a"}) || len(c.Leaf.IPAddresses) != 1 || c.Leaf.IPAddresses[0].String() != "192.0.2.7" {
		t.Fatalf("SANs %v %v", c.Leaf.DNSNames, c.Leaf.IPAddresses)
	}
	csrs := f.cluster.csrs(t)
	if len(csrs) != 1 || csrs[0].Spec.SignerName != certificatesv1.KubeletServingSignerName {
		t.Fatalf("CSRs %+v", csrs)
	}
	first := serial(c)

	// The node's address changed: a restarted service asks again at once.
	f.stop()
	f.opts.Node.IPs = []string{"192.0.2.8"}
	f.start(t)
	c = f.waitFor(t, KindServing, "a certificate for the new address", func(c Certificate) bool {
		return c.State == "valid" && serial(c) != first
	})
	if c.Leaf.IPAddresses[0].String() != "192.0.2.8" {
		t.Fatalf("IPs %v", c.Leaf.IPAddresses)
	}
}

func TestServingRotationIsCountedWithTheAgeOfTheReplacedCertificate(t *testing.T) {
	f := newFixture(t)
	f.opts.Serving = true
	now := f.clock.Now()
	f.install(t, f.clientStore(), pkitest.Cert{NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour)})
	old := f.install(t, f.servingStore(), pkitest.Cert{NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(10 * time.Minute),
		DNSNames: []string{"host-a"}, IPs: f.ipsOf()})
	f.start(t)
	f.waitFor(t, KindServing, "a new serving certificate", func(c Certificate) bool { return c.State == "valid" && serial(c) != old.SerialNumber.String() })
	if got := testutil.ToFloat64(f.opts.Metrics.rotations.WithLabelValues("serving")); got != 1 {
		t.Fatalf("serving rotations = %v", got)
	}
	if n := testutil.CollectAndCount(f.opts.Metrics.serverRotation); n != 1 {
		t.Fatalf("server rotation histogram: %d series", n)
	}
	if got := gauge(t, f, "kubelet_certificate_manager_server_ttl_seconds"); got < 23*3600 {
		t.Fatalf("server TTL = %v", got)
	}
}

func (f *fixture) ipsOf() []net.IP {
	var ips []net.IP
	for _, s := range f.opts.Node.IPs {
		ips = append(ips, net.ParseIP(s))
	}
	return ips
}

func TestWatchSendsTheListThenEveryChange(t *testing.T) {
	f := newFixture(t)
	now := f.clock.Now()
	old := f.install(t, f.clientStore(), pkitest.Cert{NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour)})
	m := f.start(t)
	f.waitFor(t, KindClient, "valid", func(c Certificate) bool { return c.State == "valid" })
	sub := m.Subscribe()
	defer sub.Close()
	next := func() []Certificate {
		select {
		case ev := <-sub.Events():
			return ev.Value
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
			return nil
		}
	}
	if first := next(); len(first) != 2 || first[0].Kind != KindClient || first[1].Kind != KindServing || serial(first[0]) != old.SerialNumber.String() {
		t.Fatalf("first event %+v", first)
	}
	go func() { _, _ = m.Rotate(context.Background(), KindClient) }()
	var states []string
	for {
		list := next()
		states = append(states, list[0].State)
		if list[0].State == "valid" && serial(list[0]) != old.SerialNumber.String() {
			break
		}
	}
	if !slices.ContainsFunc(states, func(s string) bool { return strings.HasPrefix(s, "rotating: submitted CSR") }) {
		t.Fatalf("states seen: %q", states)
	}
}

// gauge is the value of the registered gauge name.
func gauge(t *testing.T, f *fixture, name string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestCSRsAskForTheConfiguredLifetime(t *testing.T) {
	f := newFixture(t)
	f.opts.Lifetime = 15 * time.Minute
	f.opts.Serving = true
	now := f.clock.Now()
	old := f.install(t, f.clientStore(), pkitest.Cert{NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour)})
	if err := os.WriteFile(filepath.Join(f.dir, ".rotate-client"), []byte("rotation requested\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	f.waitFor(t, KindServing, "a serving certificate", func(c Certificate) bool { return c.State == "valid" })
	f.waitFor(t, KindClient, "a rotated client certificate", func(c Certificate) bool {
		return c.State == "valid" && serial(c) != old.SerialNumber.String()
	})
	csrs := f.cluster.csrs(t)
	if len(csrs) != 2 {
		t.Fatalf("%d CSRs, want one client and one serving", len(csrs))
	}
	for _, r := range csrs {
		if s := r.Spec.ExpirationSeconds; s == nil || *s != 900 {
			t.Errorf("CSR %s for %s asks for expirationSeconds %v, want 900", r.Name, r.Spec.SignerName, s)
		}
	}
}
