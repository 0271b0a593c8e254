package harnesstest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/integration/harness"
	certsv1 "github.com/unitlet/unitlet/proto/unitlet/certs/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/pki"
)

// The default stack's node-1 (podsyncNode, an nspawn machine under systemd) joins with the
// bootstrap token alone and asks for certificates that live 10 minutes
// (certificateLifetime: 10m, the shortest the API server accepts), so its client and
// serving certificates expire, and are rotated, while the suite runs.

// auditEvent is the part of an API server audit event (audit.k8s.io/v1) the tests read.
type auditEvent struct {
	Verb string `json:"verb"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	StageTimestamp metav1.MicroTime `json:"stageTimestamp"`
}

// auditEvents are the API server's audit events (see the harness's audit policy). The
// API server appends to the log while it is read (more so with tests running in
// parallel): an unfinished last line is left out.
func auditEvents(t *testing.T) []auditEvent {
	t.Helper()
	b, err := os.ReadFile(stack.AuditLog())
	if err != nil {
		t.Fatal(err)
	}
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	var out []auditEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("%s: %v", stack.AuditLog(), err)
		}
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// nodeClient is a client with node's own kubeconfig, the one its services use.
func nodeClient(t *testing.T, node string) (kubernetes.Interface, string) {
	t.Helper()
	kubeconfig, _ := stack.NodeCredentials(node)
	stack.WaitFor(t, 2*time.Minute, node+"'s kubeconfig written by TLS bootstrap", func(context.Context) (bool, string) {
		if _, err := pki.CheckKubeconfig(kubeconfig, time.Now()); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return clientFor(t, kubeconfig), kubeconfig
}

// clientFor is a client with the credentials of kubeconfig.
func clientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	rc, err := harness.RESTConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNspawnNodeJoinsWithTheBootstrapTokenAlone: the machine was given the bootstrap token and
// no other credentials; it turns Ready, and its Node and Lease are written by
// system:node:<name> (the API server's audit log says who wrote them).
func TestNspawnNodeJoinsWithTheBootstrapTokenAlone(t *testing.T) {
	// Serial: audit log must show Node writes by the node only (before the admission tests label it).
	node := nspawnNode(t)
	waitNodeReady(t, 2*time.Minute)
	c, _ := nodeClient(t, node)
	if u := whoAmI(t, c); u.Username != "system:node:"+node || !slices.Contains(u.Groups, "system:nodes") {
		t.Errorf("%s's kubeconfig authenticates as %q %v, want system:node:%s in system:nodes", node, u.Username, u.Groups, node)
	}

	// Its first certificate came from a CSR of the bootstrap token, asking for 10 minutes.
	csrs, err := admin(t).CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var bootstrapCSR *certificatesv1.CertificateSigningRequest
	for i, r := range csrs.Items {
		if r.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && slices.Contains(r.Spec.Groups, "system:bootstrappers") &&
			len(r.Status.Certificate) > 0 && subjectOf(t, r.Status.Certificate) == "system:node:"+node {
			bootstrapCSR = &csrs.Items[i]
		}
	}
	if bootstrapCSR == nil {
		t.Fatalf("no CSR of a bootstrap token issued a certificate for system:node:%s", node)
	}
	if s := ptr.Deref(bootstrapCSR.Spec.ExpirationSeconds, 0); s != 600 {
		t.Errorf("the bootstrap CSR %s asks for expirationSeconds %d, want 600 (certificateLifetime: 10m)", bootstrapCSR.Name, s)
	}

	// unitletctl in the machine shows the bootstrap done.
	var st struct {
		State   string `json:"state"`
		CSRName string `json:"csrName"`
	}
	out := stack.InNode(t, node, "unitletctl", "config", "bootstrap", "-o", "json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("unitletctl config bootstrap -o json: %v\n%s", err, out)
	}
	if st.State != "BOOTSTRAP_STATE_DONE" && st.State != "BOOTSTRAP_STATE_NOT_NEEDED" {
		t.Errorf("unitletctl config bootstrap: state %s, want DONE:\n%s", st.State, out)
	}

	// Who wrote the Node and the Lease: only the node itself. The Lease is renewed every
	// 10 s; wait for a renewal.
	var writes map[string]int
	stack.WaitFor(t, time.Minute, "the node's registration and a lease renewal in the audit log", func(context.Context) (bool, string) {
		writes = map[string]int{}
		for _, ev := range auditEvents(t) {
			r := ev.ObjectRef
			if r == nil || r.Name != node || !slices.Contains([]string{"create", "update", "patch"}, ev.Verb) ||
				(r.Resource != "nodes" && r.Resource != "leases") || ev.ResponseStatus == nil || ev.ResponseStatus.Code >= 300 {
				continue
			}
			what := ev.Verb + " " + r.Resource
			if r.Subresource != "" {
				what += "/" + r.Subresource
			}
			writes[what+" by "+ev.User.Username]++
		}
		by := " by system:node:" + node
		return writes["create nodes"+by] > 0 && writes["update leases"+by] > 0, fmt.Sprint(writes)
	})
	for w := range writes {
		if !strings.HasSuffix(w, " by system:node:"+node) {
			t.Errorf("%s's Node or Lease written by someone else: %s", node, w)
		}
	}
	t.Logf("writes of %s's Node and Lease: %v", node, writes)
}

// subjectOf is the common name of a PEM certificate.
func subjectOf(t *testing.T, pemBytes []byte) string {
	t.Helper()
	certs, err := pki.ParseCertificates(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0].Subject.CommonName
}

// nodeCertificates are node's certificates as its unitlet-certs lists them, by kind.
func nodeCertificates(t *testing.T, node string) map[certsv1.CertificateKind]*certsv1.Certificate {
	t.Helper()
	conn, err := bus.Dial(stack.NodeSocketDir(node), "certs")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := certsv1.NewCertsServiceClient(conn).ListCertificates(ctx, &certsv1.ListCertificatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[certsv1.CertificateKind]*certsv1.Certificate{}
	for _, c := range l.GetCertificates() {
		out[c.GetKind()] = c
	}
	return out
}

// tokenPod is a pod of the default service account's token (a projected volume that
// unitlet-volumes fills with a TokenRequest as the node).
func tokenPod(name string) *corev1.Pod {
	p := busyboxPod(name, "sleep 3600")
	p.Spec.AutomountServiceAccountToken = nil
	return p
}

// TestNodeOutlivesItsShortLivedCertificates forces node-1's client and serving certificates
// to rotate now, starts a pod, then (after t.Parallel, which holds it until the package's
// serial tests have run, so the wait overlaps the parallel ones) waits past those certificates'
// expiry and checks that nothing noticed: unitlet-certs rotated both again by itself, the
// pod still runs with no restart, the lease is renewed, a new pod with a service-account
// token starts and is reported, the node API serves a current certificate, and the API
// server refused none of the node's services (no 401 in its audit log).
func TestNodeOutlivesItsShortLivedCertificates(t *testing.T) {
	node := nspawnNode(t)
	waitNodeReady(t, 2*time.Minute)
	since := time.Now()
	conn, err := bus.Dial(stack.NodeSocketDir(node), "certs")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	certs := certsv1.NewCertsServiceClient(conn)
	forced := map[certsv1.CertificateKind]*certsv1.Certificate{}
	for _, kind := range []certsv1.CertificateKind{certsv1.CertificateKind_CERTIFICATE_KIND_CLIENT, certsv1.CertificateKind_CERTIFICATE_KIND_SERVING} {
		asked := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		r, err := certs.Rotate(ctx, &certsv1.RotateRequest{Kind: kind})
		cancel()
		if err != nil {
			t.Fatalf("rotate %s: %v\n%s", kind, err, stack.Logs(30))
		}
		c := r.GetCertificate()
		// The signer backdates notBefore by 5 minutes; notAfter is the asked lifetime away.
		if left := c.GetNotAfter().AsTime().Sub(asked); left > 11*time.Minute {
			t.Fatalf("the %s certificate is valid for %s more, want 10 minutes (certificateLifetime: 10m)", kind, left.Round(time.Second))
		}
		forced[kind] = c
	}
	expiry := forced[certsv1.CertificateKind_CERTIFICATE_KIND_CLIENT].GetNotAfter().AsTime()
	if s := forced[certsv1.CertificateKind_CERTIFICATE_KIND_SERVING].GetNotAfter().AsTime(); s.After(expiry) {
		expiry = s
	}
	// It runs through the tests that follow, one of which taints the node NoExecute.
	pod := tokenPod("certlife-before")
	pod.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	createPod(t, pod)
	before := apiPodRunningReady(t, "certlife-before", 2*time.Minute)
	t.Logf("forced rotations: the certificates in use expire at %s; the check runs after the serial tests, beside the parallel ones", expiry.Format(time.RFC3339))

	t.Parallel()
	if wait := time.Until(expiry.Add(15 * time.Second)); wait > 0 {
		t.Logf("waiting %s for the forced certificates to expire", wait.Round(time.Second))
		time.Sleep(wait)
	}

	// unitlet-certs replaced both before they expired, by itself.
	now := time.Now()
	for kind, was := range forced {
		c := nodeCertificates(t, node)[kind]
		if c.GetSerial() == was.GetSerial() || !c.GetNotAfter().AsTime().After(now) {
			t.Errorf("%s certificate: serial %s valid until %s (the forced one was %s until %s), want a newer, valid one",
				kind, c.GetSerial(), c.GetNotAfter().AsTime(), was.GetSerial(), was.GetNotAfter().AsTime())
		}
	}
	served, err := servedCertificate(t, strings.TrimPrefix(nodeAPI(t), "https://"))
	if err != nil || !served.NotAfter.After(now) {
		t.Errorf("the node API after the expiry: %v (serves a certificate valid until %v)", err, served)
	}

	// The node keeps talking: its lease is renewed after the expiry.
	stack.WaitFor(t, time.Minute, "the lease renewed after the forced certificates expired", func(ctx context.Context) (bool, string) {
		l, err := admin(t).CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(expiry), fmt.Sprintf("renewTime %v", l.Spec.RenewTime)
	})
	if r := nodeReady(waitNodeReady(t, time.Minute)); r == nil || r.Status != corev1.ConditionTrue {
		t.Errorf("%s not Ready after the expiry: %v", node, r)
	}

	// The pod from before runs on, untouched.
	p, err := admin(t).CoreV1().Pods("default").Get(context.Background(), "certlife-before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 ||
		p.Status.ContainerStatuses[0].ContainerID != before.Status.ContainerStatuses[0].ContainerID || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("certlife-before after the expiry: phase %s, containers %+v; before: %+v", p.Status.Phase, p.Status.ContainerStatuses, before.Status.ContainerStatuses)
	}

	// A new pod: podsync sees it, volumes gets its token, status reports it Running.
	createPod(t, tokenPod("certlife-after"))
	apiPodRunningReady(t, "certlife-after", 2*time.Minute)
	if tok := mustInPod(t, "certlife-after", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token"); strings.Count(tok, ".") != 2 {
		t.Errorf("the token in certlife-after is not a JWT: %q", tok)
	}

	// No service of the node was refused by the API server since the forced rotation.
	for _, ev := range auditEvents(t) {
		if ev.ResponseStatus == nil || ev.ResponseStatus.Code != 401 || ev.StageTimestamp.Time.Before(since) {
			continue
		}
		for _, svc := range []string{"unitlet-podsync/", "unitlet-status/", "unitlet-volumes/", "unitlet-certs/"} {
			if strings.HasPrefix(ev.UserAgent, svc) {
				t.Errorf("401 at %s for %s (%s %+v)", ev.StageTimestamp.Format(time.RFC3339), ev.UserAgent, ev.Verb, ev.ObjectRef)
			}
		}
	}
}

// TestVolumesTokenIsRefreshed waits for a projected service-account token to be refreshed:
// 600 s is the shortest lifetime the API server grants, refreshed at 80% (480 s) by the
// next reconcile (syncFrequency, 1 minute), so about 9 minutes. Like
// TestNodeOutlivesItsShortLivedCertificates it starts its pod early (this file sorts
// first) and waits in parallel, while the other tests run; its pod tolerates the taints
// they set.
func TestVolumesTokenIsRefreshed(t *testing.T) {
	waitNodeReady(t, 90*time.Second)
	p := busyboxPod("vol-token", "while true; do sleep 1; done")
	p.Spec.Volumes = []corev1.Volume{{Name: "tok", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "unitlet-refresh", ExpirationSeconds: ptr.To[int64](600), Path: "token"}},
	}}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "tok", MountPath: "/tok"}}
	p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	createPod(t, p)
	apiPodRunningReady(t, "vol-token", time.Minute)
	first := mustInPod(t, "vol-token", "cat", "/tok/token")
	start := time.Now()
	t.Parallel()
	var second string
	stack.WaitFor(t, 11*time.Minute, "the token refreshed in the running container", func(ctx context.Context) (bool, string) {
		out, err := inPod(t, "vol-token", "cat", "/tok/token")
		second = out
		if err != nil || out == "" || out == first {
			time.Sleep(5 * time.Second) // minutes to go: no need to exec five times a second
			return false, fmt.Sprintf("same token after %s (%v)", time.Since(start).Round(time.Second), err)
		}
		return true, ""
	})
	t.Logf("the token was refreshed %s after the pod started (lifetime 600 s)", time.Since(start).Round(time.Second))
	review, err := admin(t).AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: second, Audiences: []string{"unitlet-refresh"}}}, metav1.CreateOptions{})
	if err != nil || !review.Status.Authenticated {
		t.Errorf("TokenReview of the refreshed token: %+v %v", review.Status, err)
	}
}
