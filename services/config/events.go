package config

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/pki"
)

// The reasons of the events unitlet-config records on its Node. The kubelet reads its
// configuration once, at start, and exits when it does not load, so it has no reason of
// its own for a reload; these follow its style (KubeletSetupFailed, NodeNotReady).
const (
	// reasonConfigInvalid: a reload failed; the configuration in effect stays.
	reasonConfigInvalid = "KubeletConfigInvalid"
	// reasonConfigLoaded: the files load again after a failure.
	reasonConfigLoaded = "KubeletConfigLoaded"
)

// eventRecorder is what unitlet-config needs of client-go's record.EventRecorder.
type eventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// eventsCheckEvery is how often the node's kubeconfig is looked at until it is usable.
const eventsCheckEvery = 5 * time.Second

// RecordNodeEvents records on the Node each load that fails and the first that succeeds
// after one, from when the node's kubeconfig is usable (TLS bootstrap may still be writing
// it) until ctx ends. A failure from before then is recorded at that point. Without a
// kubeconfig (a standalone node) there is no Node: it only waits for ctx, and a failure
// shows in the reload status (unitletctl status, the node's /healthz), the metrics and
// the log. Events are a report, not a duty: a client that cannot be made is logged, and
// the service goes on.
func (s *Service) RecordNodeEvents(ctx context.Context) error {
	cur := s.Current()
	kubeconfig := cur.GetPaths().GetKubeconfig()
	if kubeconfig == "" {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(eventsCheckEvery)
	defer tick.Stop()
	for {
		if _, err := pki.CheckKubeconfig(kubeconfig, s.now()); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	rec, err := s.newRecorder(kubeconfig)
	if err != nil {
		s.log.Warn("failed loads of the configuration will not be recorded as events on the Node", "err", err)
	} else {
		s.setRecorder(rec)
	}
	<-ctx.Done()
	return nil
}

// newRecorder is the kubelet's event recorder (source component "kubelet", this node)
// with the node's credentials and the configuration's event rate limits. Run has made
// client-go follow the rotated client certificate (kube.FollowRotatedCertificates).
func (s *Service) newRecorder(kubeconfig string) (eventRecorder, error) {
	cur, err := nodeconfig.Decode(s.Current())
	if err != nil {
		return nil, err
	}
	rc, err := kube.RESTConfig(kubeconfig, bootstrapComponent, cur.KubeletConfiguration)
	if err != nil {
		return nil, err
	}
	return kube.EventRecorder(rc, cur.KubeletConfiguration, cur.Node.GetName())
}

// setRecorder starts recording events with r, beginning with the failure in effect if
// there is one.
func (s *Service) setRecorder(r eventRecorder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recorder = r
	if s.failing() {
		s.recordInvalid()
	}
}

// recordInvalid records the failure in the reload status. s.mu is held.
func (s *Service) recordInvalid() {
	if s.recorder == nil {
		return
	}
	s.recorder.Eventf(s.nodeRef(), corev1.EventTypeWarning, reasonConfigInvalid,
		"The node's configuration did not load (%s): %s. Generation %d stays in effect; fix the files, which are reloaded when they change (unitlet-config would not start with them)",
		s.status.GetTrigger(), s.status.GetLastError(), s.current.GetGeneration())
}

// recordLoaded records that the files load again. s.mu is held.
func (s *Service) recordLoaded() {
	if s.recorder == nil {
		return
	}
	s.recorder.Eventf(s.nodeRef(), corev1.EventTypeNormal, reasonConfigLoaded,
		"The node's configuration loads again: generation %d in effect", s.current.GetGeneration())
}

// nodeRef is the Node as the kubelet refers to it in its events.
func (s *Service) nodeRef() *corev1.ObjectReference {
	name := s.current.GetNode().GetName()
	return &corev1.ObjectReference{Kind: "Node", Name: name, UID: types.UID(name)}
}
