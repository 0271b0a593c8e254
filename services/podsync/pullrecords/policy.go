package pullrecords

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Policy is imagePullCredentialsVerificationPolicy: which images present on the node a
// pod must prove it may use.
type Policy struct {
	name kubeletv1beta1.ImagePullCredentialsVerificationPolicy
	// exact and prefixes are preloadedImagesVerificationAllowlist's patterns: image names
	// without tag or digest, and the prefixes of those that end in /*.
	exact    map[string]bool
	prefixes []string
}

// NewPolicy makes the policy of name, with allowlist for NeverVerifyAllowlistedImages. The
// configuration is validated before; an unknown name is still an error here.
func NewPolicy(name kubeletv1beta1.ImagePullCredentialsVerificationPolicy, allowlist []string) (Policy, error) {
	p := Policy{name: name, exact: map[string]bool{}}
	switch name {
	case kubeletv1beta1.NeverVerify, kubeletv1beta1.NeverVerifyPreloadedImages, kubeletv1beta1.AlwaysVerify:
	case kubeletv1beta1.NeverVerifyAllowlistedImages:
		for _, pattern := range allowlist {
			if prefix, ok := strings.CutSuffix(pattern, "/*"); ok {
				p.prefixes = append(p.prefixes, prefix+"/")
				continue
			}
			p.exact[pattern] = true
		}
	default:
		return Policy{}, fmt.Errorf("imagePullCredentialsVerificationPolicy: unknown policy %q", name)
	}
	return p, nil
}

// verify reports whether a pod must hold credentials for image, present on the node;
// pulledHere is whether unitlet (or a kubelet before it) pulled it, rather than someone
// preloading it into the runtime.
func (p Policy) verify(image string, pulledHere bool) bool {
	switch p.name {
	case kubeletv1beta1.NeverVerify:
		return false
	case kubeletv1beta1.NeverVerifyPreloadedImages:
		return pulledHere
	case kubeletv1beta1.NeverVerifyAllowlistedImages:
		return !p.allowlisted(image)
	}
	return true
}

func (p Policy) allowlisted(image string) bool {
	name, err := withoutTagOrDigest(image)
	if err != nil {
		name = image
	}
	if p.exact[name] {
		return true
	}
	for _, prefix := range p.prefixes {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// withoutTagOrDigest is image as written less its tag and digest: the key the kubelet's
// records use (busybox stays busybox, not docker.io/library/busybox).
func withoutTagOrDigest(image string) (string, error) {
	ref, err := reference.Parse(image)
	if err != nil {
		return "", err
	}
	name := image
	if d, ok := ref.(reference.Digested); ok {
		var found bool
		if name, found = strings.CutSuffix(name, "@"+d.Digest().String()); !found {
			return "", fmt.Errorf("image %q: the digest is not last", image)
		}
	}
	if t, ok := ref.(reference.Tagged); ok {
		var found bool
		if name, found = strings.CutSuffix(name, ":"+t.Tag()); !found {
			return "", fmt.Errorf("image %q: the tag is not last before the digest", image)
		}
	}
	return name, nil
}

// withDefaultTag is image with :latest when it has neither tag nor digest, written as the
// pod wrote it otherwise: the name the kubelet's pull intents carry.
func withDefaultTag(image string) (string, error) {
	ref, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", err
	}
	if _, tagged := ref.(reference.Tagged); tagged {
		return image, nil
	}
	if _, digested := ref.(reference.Digested); digested {
		return image, nil
	}
	return image + ":latest", nil
}

// sameImage reports whether a and b name the same image reference once normalized
// (busybox:latest is docker.io/library/busybox:latest).
func sameImage(a, b string) bool {
	na, err := reference.ParseNormalizedNamed(a)
	if err != nil {
		return a == b
	}
	nb, err := reference.ParseNormalizedNamed(b)
	if err != nil {
		return a == b
	}
	return na.String() == nb.String()
}
