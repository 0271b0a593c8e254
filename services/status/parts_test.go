package status

import (
	"net"
	"strconv"
	"strings"
	"testing"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

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
