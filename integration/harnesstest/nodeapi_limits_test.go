package harnesstest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// 200 clients that connect to the node API and never finish a TLS handshake, and a /run
// of `yes` (endless output), take nothing from the node: the lease keeps renewing, the
// node API keeps answering, and the /run is cut off with 413 instead of filling memory.
func TestNodeAPISlowClientsAndHugeRunDoNotStarveTheLease(t *testing.T) {
	t.Parallel()
	base := nodeAPI(t)
	createPod(t, busyboxPod("limits-target", "sleep 3600"))
	apiPodRunningReady(t, "limits-target", 2*time.Minute)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	leases := admin(t).CoordinationV1().Leases("kube-node-lease")
	renewed := func() time.Time {
		l, err := leases.Get(context.Background(), podsyncNode, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			t.Fatalf("the node's lease: %v", err)
		}
		return l.Spec.RenewTime.Time
	}
	before := renewed()

	var slow []net.Conn
	for range 200 {
		c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
		if err != nil {
			t.Fatalf("open a slow client (%d open): %v", len(slow), err)
		}
		_, _ = c.Write([]byte{0x16, 0x03, 0x01}) // the start of a ClientHello, and no more
		slow = append(slow, c)
	}
	defer func() {
		for _, c := range slow {
			c.Close()
		}
	}()

	start := time.Now()
	adminHTTP := adminNodeAPIClient(t, 3*time.Minute)
	resp, err := adminHTTP.Post(base+"/run/default/limits-target/main?cmd=yes", "", nil)
	if err != nil {
		t.Fatalf("POST /run yes: %v", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "exceeds") {
		t.Errorf("POST /run yes: %d %.200q after %s, want 413 (output over the limit)", resp.StatusCode, body, time.Since(start).Round(time.Millisecond))
	}
	if code, body := getStatus(t, adminHTTP, base+"/healthz", ""); code != http.StatusOK {
		t.Errorf("GET /healthz with 200 slow clients open: %d %q", code, body)
	}
	// The lease renews every 10 s (a quarter of the 40 s lease).
	stack.WaitFor(t, time.Minute, "the lease renewed with the slow clients open", func(context.Context) (bool, string) {
		now := renewed()
		return now.After(before.Add(time.Second)), fmt.Sprintf("renewTime %s, before %s", now.Format(time.RFC3339), before.Format(time.RFC3339))
	})
}
