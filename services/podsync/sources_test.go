package podsync

import (
	"io"
	"log/slog"
	"reflect"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/unitlet/unitlet/shared/kubeapi/adapt"
)

func TestSourcesFollowTheConfiguration(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name      string
		kc        kubeletv1beta1.KubeletConfiguration
		api       bool
		want      []string
		wantLoops []string
	}{
		{"standalone, nothing", kubeletv1beta1.KubeletConfiguration{}, false, nil, nil},
		{"standalone, a directory", kubeletv1beta1.KubeletConfiguration{StaticPodPath: "/etc/kubernetes/manifests"}, false, []string{"file"}, []string{"static pods"}},
		{"all three", kubeletv1beta1.KubeletConfiguration{StaticPodPath: "/m", StaticPodURL: "http://x/pods"}, true, []string{"file", "http", "api"}, []string{"static pods", "static pod URL", "API pods"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var client *fake.Clientset
			if tc.api {
				client = fake.NewClientset()
			}
			var got []string
			if client != nil {
				got = wantedSources(&tc.kc, adapt.Clientset(client))
			} else {
				got = wantedSources(&tc.kc, nil)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("wanted sources %v, want %v", got, tc.want)
			}
			var loops []string
			var srcs []source
			if client != nil {
				srcs = podSources(&tc.kc, "node-a", adapt.Clientset(client), nil, log)
			} else {
				srcs = podSources(&tc.kc, "node-a", nil, nil, log)
			}
			for _, s := range srcs {
				loops = append(loops, s.name)
			}
			if !reflect.DeepEqual(loops, tc.wantLoops) {
				t.Errorf("loops %v, want %v", loops, tc.wantLoops)
			}
		})
	}
}
