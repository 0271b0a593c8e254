package podsource

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// urlTimeout bounds one fetch of the static pod URL (the kubelet's client timeout).
const urlTimeout = 10 * time.Second

// PollURL fetches url (with header) at once and then every period until ctx ends, and
// sends the static pods it serves, a Pod or a v1 PodList, to sink (source "http") when
// they change. An empty body means no pods. When the fetch fails or the body cannot be
// decoded, the error is reported to rep and the last good set stays; bad items of a list
// are reported and left out while the good ones are sent. The sink hears nothing from
// this source until the first good fetch. Each error is reported when it first appears,
// not at every poll.
func PollURL(ctx context.Context, url string, header http.Header, nodeName string, period time.Duration, sink Sink, rep Reporter, log *slog.Logger) error {
	if period <= 0 {
		return fmt.Errorf("poll static pod URL %s: period %v must be positive", url, period)
	}
	p := &urlPoller{
		url:      url,
		header:   header,
		nodeName: nodeName,
		sink:     sink,
		rep:      rep,
		log:      log.With("source", SourceHTTP, "url", url),
		client:   &http.Client{Timeout: urlTimeout},
	}
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		p.poll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

type urlPoller struct {
	url      string
	header   http.Header
	nodeName string
	sink     Sink
	rep      Reporter
	log      *slog.Logger
	client   *http.Client

	failing  bool
	reported map[string]bool // errors of the previous poll, reported already
	last     map[string]*corev1.Pod
	sent     []string // UIDs in the order last sent; nil before the first send
}

func (p *urlPoller) poll(ctx context.Context) {
	pods, errs := p.fetch(ctx)
	if ctx.Err() != nil {
		return
	}
	reported := make(map[string]bool, len(errs))
	for _, err := range errs {
		if !p.reported[err.Error()] {
			p.rep.BadManifest(SourceHTTP, p.url, err)
		}
		reported[err.Error()] = true
	}
	p.reported = reported
	if pods == nil {
		p.failing = true
		return
	}
	if p.failing {
		p.log.Info("static pod URL read again")
		p.failing = false
	}
	p.send(pods)
}

// fetch returns the URL's pods (nil when there is no usable answer, empty when it serves
// none) and the errors met.
func (p *urlPoller) fetch(ctx context.Context) ([]*corev1.Pod, []error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return nil, []error{fmt.Errorf("static pods from %s: %w", p.url, err)}
	}
	req.Header = p.header.Clone()
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, []error{fmt.Errorf("static pods from %s: %w", p.url, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestBytes+1))
	if err != nil {
		return nil, []error{fmt.Errorf("static pods from %s: read body: %w", p.url, err)}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, []error{fmt.Errorf("static pods from %s: %s", p.url, resp.Status)}
	}
	if len(data) == 0 {
		return []*corev1.Pod{}, nil
	}
	pods, itemErrs, err := staticPods(data, p.url, p.nodeName, SourceHTTP, time.Now())
	if err != nil {
		return nil, []error{err}
	}
	if pods == nil {
		pods = []*corev1.Pod{}
	}
	return pods, itemErrs
}

// send hands pods to the sink unless they are the pods sent last, in the same order. A pod
// unchanged since the last send goes again as the same object, keeping its first-seen time.
func (p *urlPoller) send(pods []*corev1.Pod) {
	uids := make([]string, len(pods))
	for i, pod := range pods {
		if prev, ok := p.last[string(pod.UID)]; ok {
			pods[i] = prev
		}
		uids[i] = string(pod.UID)
	}
	if p.sent != nil && slices.Equal(uids, p.sent) {
		return
	}
	p.last = make(map[string]*corev1.Pod, len(pods))
	for _, pod := range pods {
		p.last[string(pod.UID)] = pod
	}
	p.sent = uids
	p.sink.SetPods(SourceHTTP, pods)
}
