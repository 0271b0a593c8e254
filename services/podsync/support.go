package podsync

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/kubeapi"
)

// apiObjects reads the configMaps and secrets containers' env refers to.
type apiObjects struct{ client kubeapi.Interface }

func (o apiObjects) ConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	if o.client == nil {
		return nil, fmt.Errorf("configmap %s/%s: no API server (standalone node)", ns, name)
	}
	return o.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}

func (o apiObjects) Secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	if o.client == nil {
		return nil, fmt.Errorf("secret %s/%s: no API server (standalone node)", ns, name)
	}
	return o.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}

// recorder records pod events in the API (when there is one) and in the log.
type recorder struct {
	rec  record.EventRecorder
	log  *slog.Logger
	node *corev1.ObjectReference
}

// newRecorder records through the API when rc is set (nil: standalone), limited by the
// configuration's eventRecordQPS and eventBurst.
func newRecorder(rc *rest.Config, kc *kubeletconfigv1beta1.KubeletConfiguration, nodeName string, log *slog.Logger) (*recorder, error) {
	// The Node as the kubelet refers to it in its events: its name as UID too.
	node := &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)}
	r := &recorder{log: log.With("component", "events"), node: node}
	if rc != nil {
		rec, err := kube.EventRecorder(rc, kc, nodeName)
		if err != nil {
			return nil, err
		}
		r.rec = rec
	}
	return r, nil
}

// Event records an event about pod.
func (r *recorder) Event(pod *corev1.Pod, eventType, reason, message string) {
	r.log.Debug("pod event", "pod", pod.Namespace+"/"+pod.Name, "type", eventType, "reason", reason, "message", message)
	if r.rec != nil && pod.Name != "" {
		r.rec.Event(pod, eventType, reason, message)
	}
}

// NodeEvent records an event about the node.
func (r *recorder) NodeEvent(eventType, reason, message string) {
	r.log.Debug("node event", "type", eventType, "reason", reason, "message", message)
	if r.rec != nil {
		r.rec.Event(r.node, eventType, reason, message)
	}
}

// httpHeader is the kubelet's staticPodURLHeader as an http.Header.
func httpHeader(h map[string][]string) http.Header {
	out := http.Header{}
	for k, vs := range h {
		for _, v := range vs {
			out.Add(k, v)
		}
	}
	return out
}

func clonePodHealth(h *podsyncv1.RuntimeHealth) *podsyncv1.RuntimeHealth {
	if h == nil {
		return &podsyncv1.RuntimeHealth{}
	}
	return proto.Clone(h).(*podsyncv1.RuntimeHealth)
}
