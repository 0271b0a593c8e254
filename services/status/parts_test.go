package status

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/nodeconfig"
)

// Without a healthzPort there is no plain /healthz: its loop only waits, and nothing is
// bound.
func TestHealthzOffWithoutAPort(t *testing.T) {
	for _, port := range []*int32{nil, ptr.To[int32](0)} {
		p := parts{nc: &nodeconfig.Config{KubeletConfiguration: &kubeletconfigv1beta1.KubeletConfiguration{HealthzPort: port}}}
		loop, err := p.healthz(nil)
		if err != nil {
			t.Fatalf("healthzPort %v: %v", port, err)
		}
		endsWithCtx(t, loop)
	}
}

// The /healthz listener is bound when its part is built, before READY=1: a port in use
// fails the start, naming the settings and the address.
func TestHealthzPortInUseFailsTheStart(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	kc := &kubeletconfigv1beta1.KubeletConfiguration{HealthzBindAddress: "127.0.0.1", HealthzPort: ptr.To(int32(port))}
	_, err = parts{nc: &nodeconfig.Config{KubeletConfiguration: kc}}.healthz(nil)
	if err == nil || !strings.Contains(err.Error(), "healthzPort") || !strings.Contains(err.Error(), "127.0.0.1:"+strconv.Itoa(port)) {
		t.Errorf("err = %v, want one naming healthzPort and the address", err)
	}
}

// A standalone node (no kubeconfig) with webhook authentication or authorization does not
// start, as the kubelet does not: a configuration error (exit 2, systemd does not retry)
// naming the fields. With them off and AlwaysAllow it runs without a client.
func TestStandaloneRefusesWebhookModes(t *testing.T) {
	standalone := func(kc *kubeletconfigv1beta1.KubeletConfiguration) *nodeconfig.Config {
		return &nodeconfig.Config{KubeletConfiguration: kc, Paths: &configv1.Paths{}}
	}
	log := slog.New(slog.DiscardHandler)
	defaults := &kubeletconfigv1beta1.KubeletConfiguration{
		Authentication: kubeletconfigv1beta1.KubeletAuthentication{Webhook: kubeletconfigv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)}},
		Authorization:  kubeletconfigv1beta1.KubeletAuthorization{Mode: kubeletconfigv1beta1.KubeletAuthorizationModeWebhook},
	}
	client, rc, err := apiClients(context.Background(), standalone(defaults), log)
	if err == nil || !daemon.IsConfigError(err) || client != nil || rc != nil {
		t.Fatalf("standalone with webhook authentication and authorization: %v (config error %v), want a configuration error", err, daemon.IsConfigError(err))
	}
	for _, want := range []string{"authentication.webhook.enabled", "authorization.mode: Webhook", "AlwaysAllow"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: does not name %s", err, want)
		}
	}
	allow := &kubeletconfigv1beta1.KubeletConfiguration{
		Authentication: kubeletconfigv1beta1.KubeletAuthentication{Webhook: kubeletconfigv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)}},
		Authorization:  kubeletconfigv1beta1.KubeletAuthorization{Mode: kubeletconfigv1beta1.KubeletAuthorizationModeAlwaysAllow},
	}
	if client, rc, err := apiClients(context.Background(), standalone(allow), log); err != nil || client != nil || rc != nil {
		t.Errorf("standalone with webhook authentication off and AlwaysAllow: %v, %v, %v; want no client and no error", client, rc, err)
	}
}
