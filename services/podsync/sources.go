package podsync

import (
	"context"
	"log/slog"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/unitlet/unitlet/services/podsync/podsource"
	"github.com/unitlet/unitlet/shared/kubeapi"
)

// wantedSources are the pod sources the configuration turns on: the static pod directory,
// the static pod URL, and the API server unless the node is standalone (client nil).
func wantedSources(kc *kubeletv1beta1.KubeletConfiguration, client kubeapi.Interface) []string {
	var wanted []string
	if kc.StaticPodPath != "" {
		wanted = append(wanted, podsource.SourceFile)
	}
	if kc.StaticPodURL != "" {
		wanted = append(wanted, podsource.SourceHTTP)
	}
	if client != nil {
		wanted = append(wanted, podsource.SourceAPI)
	}
	return wanted
}

// source is one pod source's loop, by name.
type source struct {
	name string
	run  func(ctx context.Context) error
}

// podSources are the loops of the sources wantedSources names, each giving svc its pods.
func podSources(kc *kubeletv1beta1.KubeletConfiguration, nodeName string, client kubeapi.Interface, svc *Service, log *slog.Logger) []source {
	var out []source
	if kc.StaticPodPath != "" {
		out = append(out, source{"static pods", func(ctx context.Context) error {
			return podsource.WatchDir(ctx, kc.StaticPodPath, nodeName, kc.FileCheckFrequency.Duration, svc, svc, log.With("component", "source-file"))
		}})
	}
	if kc.StaticPodURL != "" {
		out = append(out, source{"static pod URL", func(ctx context.Context) error {
			return podsource.PollURL(ctx, kc.StaticPodURL, httpHeader(kc.StaticPodURLHeader), nodeName, kc.HTTPCheckFrequency.Duration, svc, svc, log.With("component", "source-http"))
		}})
	}
	if client != nil {
		out = append(out, source{apiSourceName, func(ctx context.Context) error {
			return podsource.WatchAPI(ctx, client, nodeName, svc, svc, log.With("component", "source-api"))
		}})
	}
	return out
}

// apiSourceName is the API server source's loop.
const apiSourceName = "API pods"

// afterNodeSync makes each source wait for nodes to sync before it gives its pods, so
// that pods are admitted against the Node in the API, after a restart too: the API
// source as long as it takes (it needs the same API server), the static sources at most
// staticSourceSyncBound.
func afterNodeSync(sources []source, nodes *nodeView) []source {
	out := make([]source, 0, len(sources))
	for _, src := range sources {
		bound := staticSourceSyncBound
		if src.name == apiSourceName {
			bound = 0
		}
		out = append(out, source{src.name, func(ctx context.Context) error {
			nodes.WaitSynced(ctx, src.name, bound)
			return src.run(ctx)
		}})
	}
	return out
}
