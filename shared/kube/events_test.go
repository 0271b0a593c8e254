package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

func TestEventConfigFollowsTheConfiguration(t *testing.T) {
	rc := &rest.Config{Host: "https://127.0.0.1:6443", QPS: 50, Burst: 100}
	cases := []struct {
		name      string
		kc        *kubeletconfigv1beta1.KubeletConfiguration
		qps       float32
		burst     int
		unlimited bool
	}{
		{"set", &kubeletconfigv1beta1.KubeletConfiguration{EventRecordQPS: ptr.To[int32](3), EventBurst: 7}, 3, 7, false},
		{"zero is no limit", &kubeletconfigv1beta1.KubeletConfiguration{EventRecordQPS: ptr.To[int32](0), EventBurst: 7}, -1, 7, true},
		{"no configuration: the kubelet's defaults", nil, 50, 100, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ec := EventConfig(rc, tc.kc)
			if ec.QPS != tc.qps || ec.Burst != tc.burst {
				t.Errorf("QPS %v burst %d, want %v %d", ec.QPS, ec.Burst, tc.qps, tc.burst)
			}
			if rc.QPS != 50 || rc.Burst != 100 {
				t.Errorf("the API client's config changed: %v %d", rc.QPS, rc.Burst)
			}
			client, err := rest.RESTClientFor(withCodec(ec))
			if err != nil {
				t.Fatal(err)
			}
			if limiter := client.GetRateLimiter(); (limiter == nil) != tc.unlimited {
				t.Errorf("rate limiter %v, want none: %v", limiter, tc.unlimited)
			} else if limiter != nil && limiter.QPS() != tc.qps {
				t.Errorf("the client's limiter allows %v a second, want %v", limiter.QPS(), tc.qps)
			}
		})
	}
}

// withCodec completes c for rest.RESTClientFor, as typed clients do.
func withCodec(c *rest.Config) *rest.Config {
	c = rest.CopyConfig(c)
	c.GroupVersion, c.APIPath = &corev1.SchemeGroupVersion, "/api"
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return c
}
