// Package pullrecords is the kubelet's ensureSecretPulledImages (the
// KubeletEnsureSecretPulledImages feature, on by default): it records which credentials
// pulled each image on the node, and decides from those records and the
// imagePullCredentialsVerificationPolicy whether a pod may use an image that is already
// present or must pull it again with its own credentials. Without it, a pod with no pull
// secret could run a private image that another pod pulled with IfNotPresent.
//
// The records are the kubelet's files, in its format (kubelet.config.k8s.io/v1beta1
// ImagePullIntent and ImagePulledRecord as JSON), under <root-dir>/image_manager: a pull
// intent in pulling/ while a pull is in flight, and a pulled record per image ID in
// pulled/, each named sha256-<hex of the image or image ID>. A node moved from the kubelet
// to unitlet keeps what its kubelet recorded.
package pullrecords

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/unitlet/unitlet/shared/checkpoint"
)

const filePrefix = "sha256-"

// Credential is what a pull succeeded with: one pull secret's coordinates and the hash of
// its credential, or, with Secret nil, credentials any pod on the node has (none, or a
// credential provider plugin's).
type Credential struct {
	Secret *kubeletv1beta1.ImagePullSecret
}

// Records keeps the pull intents and pulled records of a node.
type Records struct {
	pulling, pulled string
	policy          Policy
	log             *slog.Logger
	now             func() time.Time

	mu sync.Mutex
	// inFlight counts the pulls of each image (as intents name it) under way.
	inFlight map[string]int

	checks *prometheus.CounterVec
}

// Open makes (if need be) and opens the records under dir (<root-dir>/image_manager).
func Open(dir string, policy Policy, reg prometheus.Registerer, log *slog.Logger) (*Records, error) {
	r := &Records{
		pulling: filepath.Join(dir, "pulling"), pulled: filepath.Join(dir, "pulled"),
		policy: policy, log: log, now: time.Now,
		inFlight: map[string]int{},
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubelet_imagemanager_image_mustpull_checks_total",
			Help: "How many times it was checked whether a pod must prove its credentials to use an image present on the node, by result.",
		}, []string{"result"}),
	}
	for _, d := range []string{r.pulling, r.pulled} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("image pull records: %w", err)
		}
		checkpoint.RemoveStaleTemps(d) // left by a podsync killed mid-write
	}
	if reg != nil {
		onDisk := func(name, help, dir string) prometheus.Collector {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(r.count(dir)) })
		}
		for _, c := range []prometheus.Collector{
			r.checks,
			onDisk("kubelet_imagemanager_ondisk_pullintents", "Number of image pull intents stored on disk.", r.pulling),
			onDisk("kubelet_imagemanager_ondisk_pulledrecords", "Number of image pulled records stored on disk.", r.pulled),
		} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

func fileName(key string) string {
	return fmt.Sprintf("%s%x", filePrefix, sha256.Sum256([]byte(key)))
}

// count is the number of records in dir.
func (r *Records) count(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() && strings.HasPrefix(e.Name(), filePrefix) {
			n++
		}
	}
	return n
}

// Recover settles the intents a crash left behind: an image the runtime now has under an
// intent's name was pulled, by whom is unknown, so it gets a record with no credentials
// (any pod must then prove its own) and the intent goes. Intents of images the runtime
// lacks stay, so a later copy of the image still counts as pulled here.
func (r *Records) Recover(images []*runtimeapi.Image) {
	intents := r.intents()
	if len(intents) == 0 {
		return
	}
	for _, img := range images {
		for _, intent := range intents {
			names := append(slices.Clone(img.GetRepoTags()), img.GetRepoDigests()...)
			if !slices.ContainsFunc(names, func(n string) bool { return sameImage(n, intent) }) {
				continue
			}
			if err := r.writePulled(intent, img.GetId(), nil); err != nil {
				r.log.Error("record an image pulled before a restart", "image", intent, "imageRef", img.GetId(), "err", err)
				continue
			}
			if err := os.Remove(filepath.Join(r.pulling, fileName(intent))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				r.log.Warn("remove a settled image pull intent", "image", intent, "err", err)
			}
		}
	}
}

// intents are the images of the intents on disk.
func (r *Records) intents() []string {
	var out []string
	r.each(r.pulling, func(path string, b []byte) {
		var in kubeletv1beta1.ImagePullIntent
		if err := decode(b, "ImagePullIntent", &in); err != nil {
			r.log.Warn("unreadable image pull intent", "file", path, "err", err)
			return
		}
		out = append(out, in.Image)
	})
	return out
}

func (r *Records) each(dir string, f func(path string, b []byte)) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		r.log.Warn("list image pull records", "dir", dir, "err", err)
		return
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasPrefix(e.Name(), filePrefix) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			r.log.Warn("read an image pull record", "file", path, "err", err)
			continue
		}
		f(path, b)
	}
}

// Intend records that image (as the pod names it) is about to be pulled; each call is
// matched by one of Pulled or Failed.
func (r *Records) Intend(image string) error {
	image, err := withDefaultTag(image)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := encode(&kubeletv1beta1.ImagePullIntent{TypeMeta: typeMeta("ImagePullIntent"), Image: image})
	if err != nil {
		return err
	}
	if err := checkpoint.WriteFileAtomic(filepath.Join(r.pulling, fileName(image)), b, 0o600); err != nil {
		return err
	}
	r.inFlight[image]++
	return nil
}

// Pulled records that image was pulled as imageRef with cred, and ends its intent.
func (r *Records) Pulled(image, imageRef string, cred Credential) {
	image, err := withDefaultTag(image)
	if err != nil {
		r.log.Error("record an image pull", "image", image, "err", err)
		return
	}
	creds := &kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: cred.Secret == nil}
	if cred.Secret != nil {
		creds.KubernetesSecrets = []kubeletv1beta1.ImagePullSecret{*cred.Secret}
	}
	if err := r.writePulled(image, imageRef, creds); err != nil {
		// The intent stays: the image counts as pulled here, and pods must prove access.
		r.log.Error("record an image pull", "image", image, "imageRef", imageRef, "err", err)
		return
	}
	r.endIntent(image)
}

// Failed ends image's intent after a pull that failed.
func (r *Records) Failed(image string) {
	if image, err := withDefaultTag(image); err == nil {
		r.endIntent(image)
	}
}

func (r *Records) endIntent(image string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight[image] > 1 {
		r.inFlight[image]--
		return
	}
	if err := os.Remove(filepath.Join(r.pulling, fileName(image))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Error("remove an image pull intent", "image", image, "err", err)
		return
	}
	delete(r.inFlight, image)
}

// writePulled merges creds (nil: none) for image into imageRef's record.
func (r *Records) writePulled(image, imageRef string, creds *kubeletv1beta1.ImagePullCredentials) error {
	key, err := withoutTagOrDigest(image)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, err := r.readPulled(imageRef)
	if err != nil {
		r.log.Warn("an unreadable image pulled record is replaced", "imageRef", imageRef, "err", err)
		rec = nil
	}
	if rec == nil {
		rec = &kubeletv1beta1.ImagePulledRecord{TypeMeta: typeMeta("ImagePulledRecord"), ImageRef: imageRef,
			CredentialMapping: map[string]kubeletv1beta1.ImagePullCredentials{}}
		if creds != nil {
			rec.CredentialMapping[key] = *creds
		}
	} else if !merge(rec, key, creds) {
		return nil
	}
	rec.LastUpdatedTime = metav1.NewTime(r.now())
	b, err := encode(rec)
	if err != nil {
		return err
	}
	return checkpoint.WriteFileAtomic(filepath.Join(r.pulled, fileName(imageRef)), b, 0o600)
}

// merge adds creds for key to rec and reports whether that changed it. Node-wide access
// is final; secrets are kept by coordinates, a newer hash replacing the older.
func merge(rec *kubeletv1beta1.ImagePulledRecord, key string, creds *kubeletv1beta1.ImagePullCredentials) bool {
	if creds == nil || (!creds.NodePodsAccessible && len(creds.KubernetesSecrets) == 0 && len(creds.KubernetesServiceAccounts) == 0) {
		return false
	}
	if rec.CredentialMapping == nil {
		rec.CredentialMapping = map[string]kubeletv1beta1.ImagePullCredentials{}
	}
	old, found := rec.CredentialMapping[key]
	switch {
	case !found:
		rec.CredentialMapping[key] = *creds
		return true
	case old.NodePodsAccessible:
		return false
	case creds.NodePodsAccessible:
		rec.CredentialMapping[key] = kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
		return true
	}
	changed := false
	for _, s := range creds.KubernetesSecrets {
		i := slices.IndexFunc(old.KubernetesSecrets, func(o kubeletv1beta1.ImagePullSecret) bool {
			return o.UID == s.UID && o.Namespace == s.Namespace && o.Name == s.Name
		})
		switch {
		case i < 0:
			old.KubernetesSecrets = append(old.KubernetesSecrets, s)
			changed = true
		case old.KubernetesSecrets[i].CredentialHash != s.CredentialHash:
			old.KubernetesSecrets[i].CredentialHash = s.CredentialHash
			changed = true
		}
	}
	for _, sa := range creds.KubernetesServiceAccounts {
		if !slices.Contains(old.KubernetesServiceAccounts, sa) {
			old.KubernetesServiceAccounts = append(old.KubernetesServiceAccounts, sa)
			changed = true
		}
	}
	if changed {
		slices.SortFunc(old.KubernetesSecrets, func(a, b kubeletv1beta1.ImagePullSecret) int {
			return strings.Compare(a.Namespace+"/"+a.Name+"/"+a.UID, b.Namespace+"/"+b.Name+"/"+b.UID)
		})
		rec.CredentialMapping[key] = old
	}
	return changed
}

// readPulled is imageRef's record; nil when there is none. Called with mu held.
func (r *Records) readPulled(imageRef string) (*kubeletv1beta1.ImagePulledRecord, error) {
	b, err := os.ReadFile(filepath.Join(r.pulled, fileName(imageRef)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec kubeletv1beta1.ImagePulledRecord
	if err := decode(b, "ImagePulledRecord", &rec); err != nil {
		return nil, err
	}
	if rec.ImageRef != imageRef {
		return nil, fmt.Errorf("the record is of %q", rec.ImageRef)
	}
	return &rec, nil
}

// The results of MustPull, as the kubelet's metric counts them.
const (
	resultPolicyAllowed = "credentialPolicyAllowed"
	resultRecordFound   = "credentialRecordFound"
	resultMustAuth      = "mustAuthenticate"
	resultError         = "error"
)

// MustPull reports whether a pod must pull image, present on the node as imageRef, with
// its own credentials before it may use it. podSecrets gives the pod's pull secrets that
// match the image (coordinates and credential hash); it is called only when the records
// leave the answer to them, and its error is returned with true.
func (r *Records) MustPull(image, imageRef string, podSecrets func() ([]kubeletv1beta1.ImagePullSecret, error)) (bool, error) {
	must, result, err := r.mustPull(image, imageRef, podSecrets)
	r.checks.WithLabelValues(result).Inc()
	return must, err
}

func (r *Records) mustPull(image, imageRef string, podSecrets func() ([]kubeletv1beta1.ImagePullSecret, error)) (bool, string, error) {
	if imageRef == "" {
		return true, resultMustAuth, nil
	}
	intentName, err := withDefaultTag(image)
	if err != nil {
		r.log.Error("an image name that does not parse must be pulled", "image", image, "err", err)
		return true, resultError, nil
	}
	r.mu.Lock()
	rec, err := r.readPulled(imageRef)
	pulledHere := rec != nil || r.inFlight[intentName] > 0
	if err == nil && !pulledHere {
		_, statErr := os.Stat(filepath.Join(r.pulling, fileName(intentName)))
		pulledHere = statErr == nil
	}
	r.mu.Unlock()
	if err != nil {
		// As the kubelet: a record that cannot be read asks for a pull.
		r.log.Error("unreadable image pulled record: the pod must pull the image", "imageRef", imageRef, "err", err)
		return true, resultError, nil
	}
	if !r.policy.verify(image, pulledHere) {
		return false, resultPolicyAllowed, nil
	}
	if rec == nil {
		return true, resultMustAuth, nil
	}
	key, err := withoutTagOrDigest(image)
	if err != nil {
		return true, resultError, nil
	}
	creds, ok := rec.CredentialMapping[key]
	switch {
	case !ok:
		return true, resultMustAuth, nil
	case creds.NodePodsAccessible:
		return false, resultRecordFound, nil
	case len(creds.KubernetesSecrets) == 0:
		// Service account credentials (the kubelet's plugins with service account tokens)
		// are never given by unitlet; a record of them, left by a kubelet, is not honoured.
		return true, resultMustAuth, nil
	}
	secrets, err := podSecrets()
	if err != nil {
		return true, resultError, err
	}
	for _, s := range secrets {
		for _, known := range creds.KubernetesSecrets {
			sameSecret := s.UID == known.UID && s.Namespace == known.Namespace && s.Name == known.Name
			sameCred := known.CredentialHash != "" && s.CredentialHash == known.CredentialHash
			if !sameSecret && !sameCred {
				continue
			}
			if !sameSecret || !sameCred {
				// Another secret with the same credential, or this secret with a new one:
				// remember it too, as the kubelet does (up to its limit of 100 secrets).
				if len(creds.KubernetesSecrets) < 100 {
					s := s
					if err := r.writePulled(image, imageRef, &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{s}}); err != nil {
						r.log.Warn("record an image's new pull secret", "image", image, "imageRef", imageRef, "err", err)
					}
				}
			}
			return false, resultRecordFound, nil
		}
	}
	return true, resultMustAuth, nil
}

// Prune removes the pulled records of images the runtime no longer has (inUse are the
// IDs it lists), except records written after until, the time before the list was taken.
func (r *Records) Prune(inUse []string, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.each(r.pulled, func(path string, b []byte) {
		var rec kubeletv1beta1.ImagePulledRecord
		if err := decode(b, "ImagePulledRecord", &rec); err != nil {
			r.log.Warn("unreadable image pulled record", "file", path, "err", err)
			return
		}
		if !rec.LastUpdatedTime.Time.Before(until) || slices.Contains(inUse, rec.ImageRef) {
			return
		}
		if err := os.Remove(path); err != nil {
			r.log.Warn("remove the record of an image that is gone", "imageRef", rec.ImageRef, "err", err)
		}
	})
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: kubeletv1beta1.SchemeGroupVersion.String(), Kind: kind}
}

func encode(v any) ([]byte, error) {
	return json.Marshal(v)
}

// decode reads a record of kind; another kind or API version is an error.
func decode(b []byte, kind string, v any) error {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(b, &tm); err != nil {
		return err
	}
	if tm.Kind != kind || tm.APIVersion != kubeletv1beta1.SchemeGroupVersion.String() {
		return fmt.Errorf("want a %s of %s, got a %q of %q", kind, kubeletv1beta1.SchemeGroupVersion, tm.Kind, tm.APIVersion)
	}
	return json.Unmarshal(b, v)
}
