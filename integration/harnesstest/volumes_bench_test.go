package harnesstest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
	"github.com/unitlet/unitlet/shared/bus"
)

// BenchmarkVolumesPrepare is `make bench-volumes`: PrepareVolumes latency over the bus for a
// pod with 5 volumes (2 configMaps, 2 secrets, 1 projected of a configMap, a secret and the
// downward API, all read from the real API server), for one pod alone and for 30 pods at
// once; p50 and p99 in ms. The pods are not run: the calls are podsync's.
func BenchmarkVolumesPrepare(b *testing.B) {
	registerNode(b)
	c := benchClient(b)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("bench-vol-%d", i)
		_, _ = c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"a": "1", "b": "2", "c": "3"}}, metav1.CreateOptions{})
		_, _ = c.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"a": []byte("1"), "b": []byte("2")}}, metav1.CreateOptions{})
	}
	// The Node authorizer lets the node read only objects that a pod bound to it refers to:
	// one real pod with the same five volumes opens them to the node.
	anchor := fiveVolumePod("anchor")
	anchor.UID = ""
	anchor.Spec.NodeName = podsyncNode
	anchor.Spec.AutomountServiceAccountToken = ptr.To(false)
	anchor.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	anchor.Spec.Containers[0].Command = []string{"sleep", "3600"}
	if _, err := c.CoreV1().Pods("default").Create(ctx, anchor, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.CoreV1().Pods("default").Delete(ctx, anchor.Name, deleteNow()) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := c.CoreV1().Pods("default").Get(ctx, anchor.Name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the anchor pod does not run: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	conn, err := bus.Dial(stack.NodeSocketDir(podsyncNode), "volumes")
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := volumesv1.NewVolumesServiceClient(conn)
	for _, n := range []int{1, 30} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			var all []time.Duration
			for i := 0; i < b.N; i++ {
				all = append(all, prepareRound(b, client, n, fmt.Sprintf("%d-%d", n, i))...)
			}
			sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
			l := latencies(all)
			b.ReportMetric(float64(l.percentile(50).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(l.percentile(99).Microseconds())/1000, "p99-ms")
		})
	}
}

func fiveVolumePod(uid string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bench-vol-" + uid, Namespace: "default", UID: types.UID("bench-vol-" + uid), Labels: map[string]string{"app": "bench"}}}
	ref := func(n int) corev1.LocalObjectReference {
		return corev1.LocalObjectReference{Name: fmt.Sprintf("bench-vol-%d", n)}
	}
	p.Spec.Volumes = []corev1.Volume{
		{Name: "cm0", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref(0)}}},
		{Name: "cm1", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref(1)}}},
		{Name: "s0", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "bench-vol-0"}}},
		{Name: "s1", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "bench-vol-1"}}},
		{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref(0)}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: ref(1)}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}},
		}}}},
	}
	c := corev1.Container{Name: "main", Image: "unitlet.local/busybox:1"}
	for _, v := range p.Spec.Volumes {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
	}
	p.Spec.Containers = []corev1.Container{c}
	return p
}

// prepareRound prepares n pods at once, then releases them; it returns each prepare's time.
func prepareRound(b *testing.B, client volumesv1.VolumesServiceClient, n int, round string) []time.Duration {
	var mu sync.Mutex
	var out []time.Duration
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		pod := fiveVolumePod(fmt.Sprintf("%s-%d", round, i))
		raw, _ := json.Marshal(pod)
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, err := client.PrepareVolumes(context.Background(), &volumesv1.PrepareVolumesRequest{Pod: raw})
			d := time.Since(start)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			out = append(out, d)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("PrepareVolumes: %v", err)
	}
	for i := 0; i < n; i++ {
		if _, err := client.ReleaseVolumes(context.Background(), &volumesv1.ReleaseVolumesRequest{PodUid: fmt.Sprintf("bench-vol-%s-%d", round, i)}); err != nil {
			b.Fatalf("ReleaseVolumes: %v", err)
		}
	}
	return out
}
