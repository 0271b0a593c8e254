package kube

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/unitlet/unitlet/shared/kubeapi"
)

// EventConfig is rc limited as the kubelet's event client is: eventRecordQPS event
// creations a second with bursts of eventBurst. An eventRecordQPS of 0 means no limit,
// as the field's documentation says (client-go would read 0 as its default of 5).
func EventConfig(rc *rest.Config, kc *kubeletconfigv1beta1.KubeletConfiguration) *rest.Config {
	ec := rest.CopyConfig(rc)
	ec.QPS, ec.Burst = 50, 100
	if kc != nil {
		if kc.EventRecordQPS != nil {
			ec.QPS = float32(*kc.EventRecordQPS)
		}
		ec.Burst = int(kc.EventBurst)
	}
	if ec.QPS == 0 {
		ec.QPS = -1 // client-go: no rate limiter
	}
	return ec
}

// EventRecorder records events in the API as the kubelet does (source component
// "kubelet", host nodeName), through a client of its own limited by EventConfig.
func EventRecorder(rc *rest.Config, kc *kubeletconfigv1beta1.KubeletConfiguration, nodeName string) (record.EventRecorder, error) {
	client, err := kubeapi.NewForConfig(EventConfig(rc, kc))
	if err != nil {
		return nil, fmt.Errorf("event client: %w", err)
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(kubeapi.EventSink{Client: client})
	return b.NewRecorder(kubeapi.Scheme(), corev1.EventSource{Component: "kubelet", Host: nodeName}), nil
}
