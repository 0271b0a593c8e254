// Package podsource holds the places podsync learns which pods it should run: the API
// server (pods bound to this node), a directory of static pod manifests and a URL serving
// static pods. Each source hands its complete current set of pods to a Sink.
package podsource

import (
	corev1 "k8s.io/api/core/v1"
)

// Values of the kubernetes.io/config.source annotation, as the kubelet writes them.
const (
	SourceAPI  = "api"
	SourceFile = "file"
	SourceHTTP = "http"
)

// Annotations the kubelet puts on the pods it learns about.
const (
	// AnnotationConfigHash holds a static pod's UID: a hash of its manifest.
	AnnotationConfigHash = "kubernetes.io/config.hash"
	// AnnotationConfigSource names the source a pod came from (SourceAPI, SourceFile, SourceHTTP).
	AnnotationConfigSource = "kubernetes.io/config.source"
	// AnnotationConfigSeen is the time (RFC 3339 with nanoseconds) the pod was first seen.
	AnnotationConfigSeen = "kubernetes.io/config.seen"
	// AnnotationConfigMirror marks a mirror pod; its value is the static pod's config hash.
	AnnotationConfigMirror = corev1.MirrorPodAnnotationKey
)

// Sink receives the complete set of one source's pods each time that set changes (set
// semantics, not deltas). The pods are shared, as pods from an informer cache are: a
// source hands the same object again while the pod is unchanged, so a sink that wants to
// modify one copies it first.
type Sink interface {
	SetPods(source string, pods []*corev1.Pod)
}

// MirrorSink receives the complete set of mirror pods bound to this node each time it changes.
type MirrorSink interface {
	SetMirrorPods(pods []*corev1.Pod)
}

// Reporter is told about each manifest skipped as bad (podsync logs it, counts it in a
// metric and makes an event). name is the manifest's file path or URL; err names the
// field or the pod at fault.
type Reporter interface {
	BadManifest(source, name string, err error)
}

// scanObserver is a Reporter that also wants to know when a static pod directory was read
// (tests wait for reads with it instead of sleeping).
type scanObserver interface {
	Scanned()
}
