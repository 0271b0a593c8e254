package pullrecords

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/unitlet/unitlet/shared/checkpoint/checkpointtest"
)

const (
	private = "registry.example:5000/team/app:1"
	ref     = "sha256:0123"
)

var (
	secretA = kubeletv1beta1.ImagePullSecret{Namespace: "ns", Name: "a", UID: "uid-a", CredentialHash: "hash-1"}
	secretB = kubeletv1beta1.ImagePullSecret{Namespace: "other", Name: "b", UID: "uid-b", CredentialHash: "hash-1"}
)

func open(t *testing.T, policy kubeletv1beta1.ImagePullCredentialsVerificationPolicy, allow ...string) (*Records, string) {
	t.Helper()
	p, err := NewPolicy(policy, allow)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r, err := Open(dir, p, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return r, dir
}

func secrets(s ...kubeletv1beta1.ImagePullSecret) func() ([]kubeletv1beta1.ImagePullSecret, error) {
	return func() ([]kubeletv1beta1.ImagePullSecret, error) { return s, nil }
}

func mustPull(t *testing.T, r *Records, image string, pod func() ([]kubeletv1beta1.ImagePullSecret, error)) bool {
	t.Helper()
	must, err := r.MustPull(image, ref, pod)
	if err != nil {
		t.Fatal(err)
	}
	return must
}

func pull(t *testing.T, r *Records, image string, cred Credential) {
	t.Helper()
	if err := r.Intend(image); err != nil {
		t.Fatal(err)
	}
	r.Pulled(image, ref, cred)
}

func TestAPrivateImageNeedsThePodsOwnSecret(t *testing.T) {
	r, _ := open(t, kubeletv1beta1.NeverVerifyPreloadedImages)
	a := secretA
	pull(t, r, private, Credential{Secret: &a})

	if mustPull(t, r, private, secrets(secretA)) {
		t.Error("the pod with the secret that pulled the image must pull again")
	}
	if !mustPull(t, r, private, secrets()) {
		t.Error("a pod without a secret may use the private image")
	}
	// Another tag of the same repository and image ID: the record is by repository.
	if mustPull(t, r, "registry.example:5000/team/app:other", secrets(secretA)) {
		t.Error("another tag of the repository, same image: the secret should suffice")
	}
	other := kubeletv1beta1.ImagePullSecret{Namespace: "ns", Name: "c", UID: "uid-c", CredentialHash: "hash-2"}
	if !mustPull(t, r, private, secrets(other)) {
		t.Error("a pod with another credential may use the private image")
	}
	// The same credential in another secret proves access, and is remembered.
	if mustPull(t, r, private, secrets(secretB)) {
		t.Error("a secret holding the same credential must suffice")
	}
	rec, err := r.readPulled(ref)
	if err != nil || len(rec.CredentialMapping["registry.example:5000/team/app"].KubernetesSecrets) != 2 {
		t.Errorf("record after a match by hash: %+v, %v; want both secrets", rec, err)
	}
	// The same secret with a rotated credential still proves access (its coordinates).
	rotated := secretA
	rotated.CredentialHash = "hash-3"
	if mustPull(t, r, private, secrets(rotated)) {
		t.Error("the pulling secret with a new credential must suffice, as for the kubelet")
	}
}

func TestAnAnonymousPullServesEveryPod(t *testing.T) {
	r, _ := open(t, kubeletv1beta1.AlwaysVerify)
	a := secretA
	pull(t, r, private, Credential{Secret: &a})
	pull(t, r, private, Credential{}) // then pulled with no secret (or a plugin's)
	called := false
	must, err := r.MustPull(private, ref, func() ([]kubeletv1beta1.ImagePullSecret, error) { called = true; return nil, nil })
	if err != nil || must || called {
		t.Errorf("MustPull = %v, %v (secrets asked: %v); want false without asking", must, err, called)
	}
	rec, _ := r.readPulled(ref)
	if got := rec.CredentialMapping["registry.example:5000/team/app"]; !got.NodePodsAccessible || len(got.KubernetesSecrets) != 0 {
		t.Errorf("record = %+v, want node-wide access only", got)
	}
}

func TestPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy    kubeletv1beta1.ImagePullCredentialsVerificationPolicy
		allow     []string
		preloaded bool // want a pull for an image nobody recorded
		pulled    bool // want a pull for an image recorded pulled with secret A, pod without it
	}{
		{kubeletv1beta1.NeverVerify, nil, false, false},
		{kubeletv1beta1.NeverVerifyPreloadedImages, nil, false, true},
		{kubeletv1beta1.AlwaysVerify, nil, true, true},
		{kubeletv1beta1.NeverVerifyAllowlistedImages, []string{"registry.example:5000/team/*"}, false, false},
		{kubeletv1beta1.NeverVerifyAllowlistedImages, []string{"registry.example:5000/team/app"}, false, false},
		{kubeletv1beta1.NeverVerifyAllowlistedImages, []string{"registry.example:5000/other/*", "registry.example:5000/team/ap"}, true, true},
	} {
		r, _ := open(t, tc.policy, tc.allow...)
		if got := mustPull(t, r, private, secrets()); got != tc.preloaded {
			t.Errorf("%s %v, a preloaded image: must pull %v, want %v", tc.policy, tc.allow, got, tc.preloaded)
		}
		a := secretA
		pull(t, r, private, Credential{Secret: &a})
		if got := mustPull(t, r, private, secrets()); got != tc.pulled {
			t.Errorf("%s %v, an image pulled with a secret: must pull %v, want %v", tc.policy, tc.allow, got, tc.pulled)
		}
	}
}

func TestAnImageBeingPulledIsNotPreloaded(t *testing.T) {
	r, _ := open(t, kubeletv1beta1.NeverVerifyPreloadedImages)
	if err := r.Intend(private); err != nil {
		t.Fatal(err)
	}
	// Another pod sees the image (pulled by another node agent, say) while unitlet's pull
	// of the same name is in flight: it was pulled here, so the pod must prove access.
	if !mustPull(t, r, private, secrets()) {
		t.Error("an image with a pull in flight counted as preloaded")
	}
	r.Failed(private)
	if mustPull(t, r, private, secrets()) {
		t.Error("after the failed pull the image still counts as pulled here")
	}
}

func TestRecoverSettlesIntentsACrashLeft(t *testing.T) {
	r, dir := open(t, kubeletv1beta1.NeverVerifyPreloadedImages)
	if err := r.Intend("busybox"); err != nil {
		t.Fatal(err)
	}
	if err := r.Intend("registry.example:5000/gone:1"); err != nil {
		t.Fatal(err)
	}
	// A new process over the same directory, the runtime holding busybox only.
	r2, err := Open(dir, r.policy, nil, r.log)
	if err != nil {
		t.Fatal(err)
	}
	r2.Recover([]*runtimeapi.Image{{Id: ref, RepoTags: []string{"docker.io/library/busybox:latest"}}})
	if got := r2.intents(); len(got) != 1 || got[0] != "registry.example:5000/gone:1" {
		t.Errorf("intents after recovery = %v, want the unpulled one only", got)
	}
	// busybox was pulled here by someone unknown: every pod must prove access.
	if !mustPull(t, r2, "busybox", secrets()) {
		t.Error("an image whose pull was interrupted is usable without credentials")
	}
	if !mustPull(t, r2, "registry.example:5000/gone:1", secrets()) {
		// Its intent remains, so the name counts as pulled here (and ref has no mapping).
		t.Error("an image named by a pending intent is usable without credentials")
	}
}

func TestPruneDropsRecordsOfImagesGone(t *testing.T) {
	r, dir := open(t, kubeletv1beta1.NeverVerifyPreloadedImages)
	pull(t, r, private, Credential{})
	r.Prune([]string{ref}, time.Now().Add(time.Hour))
	if _, err := os.Stat(filepath.Join(dir, "pulled", fileName(ref))); err != nil {
		t.Fatalf("a record of an image still listed was removed: %v", err)
	}
	r.Prune(nil, time.Now().Add(-time.Hour))
	if _, err := os.Stat(filepath.Join(dir, "pulled", fileName(ref))); err != nil {
		t.Fatalf("a record newer than the list was removed: %v", err)
	}
	r.Prune(nil, time.Now().Add(time.Hour))
	if _, err := os.Stat(filepath.Join(dir, "pulled", fileName(ref))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the record of a removed image stays: %v", err)
	}
}

// A record as a kubelet 1.36 writes it is read, and its secret honoured.
func TestReadsTheKubeletsRecords(t *testing.T) {
	r, dir := open(t, kubeletv1beta1.NeverVerifyPreloadedImages)
	const kubelets = `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"2026-01-02T03:04:05Z","imageRef":"sha256:0123","credentialMapping":{"registry.example:5000/team/app":{"kubernetesSecrets":[{"uid":"uid-a","namespace":"ns","name":"a","credentialHash":"hash-1"}]}}}`
	if err := os.WriteFile(filepath.Join(dir, "pulled", fileName(ref)), []byte(kubelets), 0o600); err != nil {
		t.Fatal(err)
	}
	if mustPull(t, r, private, secrets(secretA)) {
		t.Error("the kubelet's record of secret a was not honoured")
	}
	if !mustPull(t, r, private, secrets()) {
		t.Error("the kubelet's record let a pod without a secret use the image")
	}
	// An unreadable record asks for a pull.
	if err := os.WriteFile(filepath.Join(dir, "pulled", fileName(ref)), []byte(`{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if !mustPull(t, r, private, secrets(secretA)) {
		t.Error("an unreadable record did not ask for a pull")
	}
}

func TestSecretsErrorIsReturned(t *testing.T) {
	r, _ := open(t, kubeletv1beta1.NeverVerifyPreloadedImages)
	a := secretA
	pull(t, r, private, Credential{Secret: &a})
	boom := errors.New("boom")
	must, err := r.MustPull(private, ref, func() ([]kubeletv1beta1.ImagePullSecret, error) { return nil, boom })
	if !must || !errors.Is(err, boom) {
		t.Errorf("MustPull = %v, %v; want true, boom", must, err)
	}
}

func TestNames(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                            "busybox",
		"busybox:1.36":                       "busybox",
		"r.example:5000/a/b:t@sha256:" + sha: "r.example:5000/a/b",
		"r.example:5000/a/b@sha256:" + sha:   "r.example:5000/a/b",
	} {
		if got, err := withoutTagOrDigest(in); err != nil || got != want {
			t.Errorf("withoutTagOrDigest(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"busybox":                        "busybox:latest",
		"r.example:5000/a":               "r.example:5000/a:latest",
		"busybox:1":                      "busybox:1",
		"r.example:5000/a@sha256:" + sha: "r.example:5000/a@sha256:" + sha,
	} {
		if got, err := withDefaultTag(in); err != nil || got != want {
			t.Errorf("withDefaultTag(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

const sha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

func TestOnDiskGauges(t *testing.T) {
	p, _ := NewPolicy(kubeletv1beta1.NeverVerifyPreloadedImages, nil)
	reg := prometheus.NewRegistry()
	r, err := Open(t.TempDir(), p, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Intend("a:1"); err != nil {
		t.Fatal(err)
	}
	pull(t, r, private, Credential{})
	want := `
# HELP kubelet_imagemanager_ondisk_pulledrecords Number of image pulled records stored on disk.
# TYPE kubelet_imagemanager_ondisk_pulledrecords gauge
kubelet_imagemanager_ondisk_pulledrecords 1
# HELP kubelet_imagemanager_ondisk_pullintents Number of image pull intents stored on disk.
# TYPE kubelet_imagemanager_ondisk_pullintents gauge
kubelet_imagemanager_ondisk_pullintents 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubelet_imagemanager_ondisk_pulledrecords", "kubelet_imagemanager_ondisk_pullintents"); err != nil {
		t.Error(err)
	}
}

func TestOpenRemovesTemporaryFilesAKilledPodsyncLeft(t *testing.T) {
	_, dir := open(t, kubeletv1beta1.NeverVerify)
	var temps []checkpointtest.Temps
	for _, d := range []string{"pulling", "pulled"} {
		temps = append(temps, checkpointtest.LeaveTemps(t, filepath.Join(dir, d), "sha256-0123"))
	}
	p, _ := NewPolicy(kubeletv1beta1.NeverVerify, nil)
	if _, err := Open(dir, p, nil, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	for _, tt := range temps {
		tt.Swept(t)
	}
}
