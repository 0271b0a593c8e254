// Package mirrorpod keeps the API server's mirror pods in step with the node's static pods:
// a mirror pod is the read-only copy of a static pod that makes it visible in the API.
package mirrorpod

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/services/podsync/podsource"
	"github.com/unitlet/unitlet/shared/kubeapi"
)

// ErrNodeNotRegistered is returned (wrapped) by Reconcile when a mirror pod must be created
// but the node does not exist in the API yet; the caller retries later.
var ErrNodeNotRegistered = errors.New("node is not registered yet")

// Manager creates, recreates and deletes the node's mirror pods.
type Manager struct {
	client   kubeapi.Interface
	nodeName string
	log      *slog.Logger
}

// NewManager returns a Manager for the mirror pods of nodeName.
func NewManager(client kubeapi.Interface, nodeName string, log *slog.Logger) *Manager {
	return &Manager{client: client, nodeName: nodeName, log: log}
}

// IsMirrorPod reports whether p is a mirror pod (it has the kubernetes.io/config.mirror annotation).
func IsMirrorPod(p *corev1.Pod) bool {
	_, ok := p.Annotations[podsource.AnnotationConfigMirror]
	return ok
}

// IsStaticPod reports whether p came from a static source (config.source is file or http).
func IsStaticPod(p *corev1.Pod) bool {
	switch p.Annotations[podsource.AnnotationConfigSource] {
	case podsource.SourceFile, podsource.SourceHTTP:
		return true
	}
	return false
}

// Reconcile makes the API's mirror pods match the static pods: creates missing ones, deletes and
// recreates stale ones (config.mirror hash != static pod's config.hash, or being deleted), deletes
// orphans (no static pod with that full name). Returns errors joined; safe to call often.
//
// static may hold other pods too (only static pods count); mirrors is what the API holds
// for this node (non-mirror pods in it are ignored). A mirror pod found stale is deleted
// and created anew in the same call. Call it only once every static source has been
// read, or mirror pods of static pods not read yet are deleted as orphans.
func (m *Manager) Reconcile(ctx context.Context, static []*corev1.Pod, mirrors []*corev1.Pod) error {
	byName := make(map[types.NamespacedName]*corev1.Pod, len(mirrors))
	for _, p := range mirrors {
		if IsMirrorPod(p) {
			byName[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
		}
	}
	var errs []error
	node := nodeRef{m: m}
	wanted := map[types.NamespacedName]bool{}
	for _, sp := range static {
		if !IsStaticPod(sp) {
			continue
		}
		key := types.NamespacedName{Namespace: sp.Namespace, Name: sp.Name}
		wanted[key] = true
		if mp, ok := byName[key]; ok {
			if mp.DeletionTimestamp == nil && mp.Annotations[podsource.AnnotationConfigMirror] == staticHash(sp) {
				continue
			}
			deleted, err := m.delete(ctx, mp, "stale")
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !deleted {
				continue // someone else changed it; look again next time
			}
		}
		if err := m.create(ctx, sp, &node); err != nil {
			errs = append(errs, err)
		}
	}
	for key, mp := range byName {
		if wanted[key] {
			continue
		}
		if _, err := m.delete(ctx, mp, "orphaned"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func staticHash(p *corev1.Pod) string {
	return p.Annotations[podsource.AnnotationConfigHash]
}

// nodeRef reads the Node once per Reconcile, when a mirror pod is first to be created.
type nodeRef struct {
	m    *Manager
	uid  types.UID
	err  error
	read bool
}

func (n *nodeRef) get(ctx context.Context) (types.UID, error) {
	if n.read {
		return n.uid, n.err
	}
	n.read = true
	node, err := n.m.client.CoreV1().Nodes().Get(ctx, n.m.nodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		n.err = fmt.Errorf("get node %s for mirror pods' owner: %w", n.m.nodeName, ErrNodeNotRegistered)
	case err != nil:
		n.err = fmt.Errorf("get node %s for mirror pods' owner: %w", n.m.nodeName, err)
	case node.UID == "":
		n.err = fmt.Errorf("get node %s for mirror pods' owner: node has no UID", n.m.nodeName)
	case node.DeletionTimestamp != nil:
		n.err = fmt.Errorf("node %s is being deleted, no mirror pods are created", n.m.nodeName)
	default:
		n.uid = node.UID
	}
	return n.uid, n.err
}

// mirrorOf builds the mirror pod of static pod sp, owned by the node with uid nodeUID.
func (m *Manager) mirrorOf(sp *corev1.Pod, nodeUID types.UID) *corev1.Pod {
	annotations := maps.Clone(sp.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[podsource.AnnotationConfigMirror] = staticHash(sp)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        sp.Name,
			Namespace:   sp.Namespace,
			Labels:      maps.Clone(sp.Labels),
			Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1",
				Kind:       "Node",
				Name:       m.nodeName,
				UID:        nodeUID,
				// The NodeRestriction admission plugin only lets a node create a mirror
				// pod whose owner reference to the node is marked as controller.
				Controller: ptr.To(true),
			}},
		},
		Spec: *sp.Spec.DeepCopy(),
	}
}

func (m *Manager) create(ctx context.Context, sp *corev1.Pod, node *nodeRef) error {
	uid, err := node.get(ctx)
	if err != nil {
		return fmt.Errorf("create mirror pod %s/%s: %w", sp.Namespace, sp.Name, err)
	}
	mp := m.mirrorOf(sp, uid)
	_, err = m.client.CoreV1().Pods(mp.Namespace).Create(ctx, mp, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Created meanwhile (by an earlier call whose answer was lost, say): fine when
		// it mirrors this version of the static pod.
		existing, getErr := m.client.CoreV1().Pods(mp.Namespace).Get(ctx, mp.Name, metav1.GetOptions{})
		if getErr == nil && existing.DeletionTimestamp == nil && IsMirrorPod(existing) &&
			existing.Annotations[podsource.AnnotationConfigMirror] == staticHash(sp) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("create mirror pod %s/%s: %w", mp.Namespace, mp.Name, err)
	}
	m.log.Info("created mirror pod", "pod", mp.Namespace+"/"+mp.Name, "hash", staticHash(sp))
	return nil
}

// delete removes mirror pod mp at once, only if it is still the object with mp's UID. It
// reports whether the pod is gone; a pod already gone or replaced is no error.
func (m *Manager) delete(ctx context.Context, mp *corev1.Pod, why string) (bool, error) {
	err := m.client.CoreV1().Pods(mp.Namespace).Delete(ctx, mp.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &mp.UID},
	})
	switch {
	case err == nil:
		m.log.Info("deleted mirror pod", "pod", mp.Namespace+"/"+mp.Name, "uid", mp.UID, "reason", why)
		return true, nil
	case apierrors.IsNotFound(err):
		return true, nil
	case apierrors.IsConflict(err):
		return false, nil
	default:
		return false, fmt.Errorf("delete %s mirror pod %s/%s (uid %s): %w", why, mp.Namespace, mp.Name, mp.UID, err)
	}
}
