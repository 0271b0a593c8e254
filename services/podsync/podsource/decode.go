package podsource

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// maxManifestBytes bounds what is read from one manifest file or URL (the kubelet's limit).
const maxManifestBytes = 10 << 20

// StaticPod decodes one static pod manifest (YAML or JSON; apiVersion v1, kind Pod) read
// from origin (a file path or URL) and turns it into the pod podsync runs, as the kubelet
// does: API defaults applied, named <name>-<nodeName>, bound to nodeName, its UID a hash of
// the manifest, nodeName, source and origin, annotated with that hash, the source and the
// time seen, tolerating every NoExecute taint. Errors name origin and the field at fault.
func StaticPod(data []byte, origin, nodeName, source string) (*corev1.Pod, error) {
	return staticPod(data, origin, nodeName, source, time.Now())
}

func staticPod(data []byte, origin, nodeName, source string, now time.Time) (*corev1.Pod, error) {
	obj, err := decodeManifest(data, origin, false)
	if err != nil {
		return nil, err
	}
	if err := completeStaticPod(obj.pod, origin, nodeName, source, now); err != nil {
		return nil, fmt.Errorf("static pod %s: %w", origin, err)
	}
	return obj.pod, nil
}

// StaticPods is StaticPod for the URL source: data holds a Pod or a v1 PodList. For a list,
// each bad item (invalid, or a name an earlier item already took) is left out and adds an
// error naming it; pods then holds the good items even though err is not nil. A manifest
// that cannot be decoded at all gives no pods.
func StaticPods(data []byte, origin, nodeName, source string) ([]*corev1.Pod, error) {
	pods, itemErrs, err := staticPods(data, origin, nodeName, source, time.Now())
	if err != nil {
		return nil, err
	}
	return pods, errors.Join(itemErrs...)
}

// staticPods separates a manifest that failed as a whole (err) from bad items of a list (itemErrs).
func staticPods(data []byte, origin, nodeName, source string, now time.Time) (pods []*corev1.Pod, itemErrs []error, err error) {
	obj, err := decodeManifest(data, origin, true)
	if err != nil {
		return nil, nil, err
	}
	if obj.pod != nil {
		if err := completeStaticPod(obj.pod, origin, nodeName, source, now); err != nil {
			return nil, nil, fmt.Errorf("static pod %s: %w", origin, err)
		}
		return []*corev1.Pod{obj.pod}, nil, nil
	}
	seen := map[string]int{}
	for i := range obj.list.Items {
		pod := &obj.list.Items[i]
		if err := completeStaticPod(pod, origin, nodeName, source, now); err != nil {
			itemErrs = append(itemErrs, fmt.Errorf("static pod %s: items[%d]: %w", origin, i, err))
			continue
		}
		key := pod.Namespace + "/" + pod.Name
		if first, dup := seen[key]; dup {
			itemErrs = append(itemErrs, fmt.Errorf("static pod %s: items[%d]: pod %s already defined by items[%d], ignoring", origin, i, key, first))
			continue
		}
		seen[key] = i
		pods = append(pods, pod)
	}
	return pods, itemErrs, nil
}

type manifest struct {
	pod  *corev1.Pod
	list *corev1.PodList
}

// decodeManifest decodes data as a v1 Pod (or PodList when allowList). Like the API server
// it ignores fields it does not know; everything else must have the right type.
func decodeManifest(data []byte, origin string, allowList bool) (manifest, error) {
	if len(data) > maxManifestBytes {
		return manifest{}, fmt.Errorf("static pod %s: manifest is larger than %d bytes", origin, maxManifestBytes)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return manifest{}, fmt.Errorf("static pod %s: parse: %w", origin, err)
	}
	if trimmed := bytes.TrimSpace(js); len(trimmed) == 0 || trimmed[0] != '{' {
		return manifest{}, fmt.Errorf("static pod %s: the manifest is not an object", origin)
	}
	var tm metav1.TypeMeta
	if err := utiljson.Unmarshal(js, &tm); err != nil {
		return manifest{}, fmt.Errorf("static pod %s: %w", origin, decodeError(js, err))
	}
	switch {
	case tm.APIVersion == "":
		return manifest{}, fmt.Errorf("static pod %s: apiVersion: required, want \"v1\"", origin)
	case tm.APIVersion != "v1":
		return manifest{}, fmt.Errorf("static pod %s: apiVersion: %q is not supported, want \"v1\"", origin, tm.APIVersion)
	}
	want := `"Pod"`
	if allowList {
		want = `"Pod" or "PodList"`
	}
	switch {
	case tm.Kind == "Pod":
		pod := &corev1.Pod{}
		if err := utiljson.Unmarshal(js, pod); err != nil {
			return manifest{}, fmt.Errorf("static pod %s: %w", origin, decodeError(js, err))
		}
		return manifest{pod: pod}, nil
	case tm.Kind == "PodList" && allowList:
		list := &corev1.PodList{}
		if err := utiljson.Unmarshal(js, list); err != nil {
			return manifest{}, fmt.Errorf("static pod %s: %w", origin, decodeError(js, err))
		}
		return manifest{list: list}, nil
	case tm.Kind == "":
		return manifest{}, fmt.Errorf("static pod %s: kind: required, want %s", origin, want)
	default:
		return manifest{}, fmt.Errorf("static pod %s: kind: %q is not supported, want %s", origin, tm.Kind, want)
	}
}

// decodeError turns a JSON decoding error into one that names the field at fault.
func decodeError(js []byte, err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		if typeErr.Field == "" {
			return fmt.Errorf("cannot decode %s as %s", typeErr.Value, typeErr.Type)
		}
		return fmt.Errorf("%s: cannot decode %s as %s", typeErr.Field, typeErr.Value, typeErr.Type)
	}
	// Quantities report a bad value without saying where it is; look for it.
	var doc any
	if json.Unmarshal(js, &doc) == nil {
		if path, value, ok := findBadQuantity(doc, ""); ok {
			return fmt.Errorf("%s: invalid quantity %q: %w", path, value, err)
		}
	}
	return fmt.Errorf("decode: %w", err)
}

// findBadQuantity walks a decoded JSON document for a resource quantity that does not
// parse: the values of resource lists (limits, requests, overhead, allocatable-like maps)
// and emptyDir size limits.
func findBadQuantity(doc any, path string) (string, string, bool) {
	switch v := doc.(type) {
	case map[string]any:
		last := path[strings.LastIndex(path, ".")+1:]
		for k, child := range v {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if s, ok := child.(string); ok && (k == "sizeLimit" || last == "limits" || last == "requests" || last == "overhead") {
				if _, err := resource.ParseQuantity(s); err != nil {
					return p, s, true
				}
			}
			if p, s, ok := findBadQuantity(child, p); ok {
				return p, s, true
			}
		}
	case []any:
		for i, child := range v {
			if p, s, ok := findBadQuantity(child, fmt.Sprintf("%s[%d]", path, i)); ok {
				return p, s, true
			}
		}
	}
	return "", "", false
}

// completeStaticPod does to a decoded pod what the kubelet does to a static pod, then
// validates the result. origin only feeds the UID hash; errors do not repeat it.
func completeStaticPod(pod *corev1.Pod, origin, nodeName, source string, now time.Time) error {
	if pod.Name == "" {
		return errors.New("metadata.name: required")
	}
	applyAPIDefaults(pod)
	// A pod given alone carries apiVersion and kind, an item of a list need not: the same
	// pod must hash the same either way.
	pod.TypeMeta = metav1.TypeMeta{}

	// The UID is a hash of what the manifest says (after defaults, so spelling out a
	// default does not change it) and of where it came from. Any UID in the manifest is
	// replaced: the UID must change whenever the manifest does.
	pod.UID = ""
	h := fnv.New128a()
	content, err := json.Marshal(pod)
	if err != nil {
		return fmt.Errorf("hash manifest: %w", err)
	}
	h.Write(content)
	fmt.Fprintf(h, "\x00node:%s\x00source:%s\x00origin:%s", nodeName, source, origin)
	pod.UID = types.UID(hex.EncodeToString(h.Sum(nil)))

	pod.Name = pod.Name + "-" + strings.ToLower(nodeName)
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Spec.NodeName = nodeName
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationConfigHash] = string(pod.UID)
	pod.Annotations[AnnotationConfigSource] = source
	pod.Annotations[AnnotationConfigSeen] = now.Format(time.RFC3339Nano)
	tolerateNoExecute(&pod.Spec)
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending}

	if errs := validateStaticPod(pod); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}

// tolerateNoExecute lets a static pod stay through node problems: it tolerates every
// NoExecute taint, unless the manifest already does.
func tolerateNoExecute(spec *corev1.PodSpec) {
	all := corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
	for _, t := range spec.Tolerations {
		if t.MatchToleration(&all) && t.TolerationSeconds == nil {
			return
		}
	}
	spec.Tolerations = append(spec.Tolerations, all)
}
