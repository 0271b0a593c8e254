package kubeletconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
)

// The group, version and kind every file and drop-in must declare.
const (
	APIVersion = "kubelet.config.k8s.io/v1beta1"
	Kind       = "KubeletConfiguration"
)

// SourceKind says where a part of the configuration came from.
type SourceKind int

// The kinds of sources, lowest precedence first.
const (
	SourceDefaults SourceKind = iota
	SourceFile
	SourceDropIn
	SourceEnvironment
	SourceFlags
)

func (k SourceKind) String() string {
	switch k {
	case SourceDefaults:
		return "defaults"
	case SourceFile:
		return "file"
	case SourceDropIn:
		return "drop-in"
	case SourceEnvironment:
		return "environment"
	case SourceFlags:
		return "flags"
	}
	return fmt.Sprintf("SourceKind(%d)", int(k))
}

// Source is one input of the configuration.
type Source struct {
	Kind SourceKind
	// Name is the file's path, or the names of the variables or flags; empty for defaults.
	Name string
	// SHA256 is the hex digest of a file's bytes; empty for the other kinds.
	SHA256 string
}

// Override is a JSON merge patch over the configuration from the environment or the
// flags, e.g. {"maxPods": 50, "clusterDNS": ["10.0.0.10"]}. Overrides apply after the
// drop-ins, in the order given. As in any merge patch, a map merges key by key, a list
// replaces the list, and null removes the field (its default applies again).
type Override struct {
	Kind  SourceKind
	Name  string
	Patch map[string]any
}

// Result is a loaded configuration.
type Result struct {
	// Config is decoded, defaulted and valid.
	Config *v1beta1.KubeletConfiguration
	// JSON is Config with apiVersion and kind, as encoding/json writes it: the same
	// inputs give the same bytes. It is final: whoever decodes it must not apply
	// defaults again (an empty evictionHard, say, is absent here and means none).
	JSON []byte
	// Sources are the inputs in the order they were applied: the defaults, the file,
	// the drop-ins, the overrides.
	Sources []Source
}

// Error is bad input: one line naming the file (or override) and the field.
type Error struct {
	// File is the path of the file, or the Name of the override.
	File string
	// Field is the JSON path of the field, e.g. "authentication.webhook.cacheTTL" or
	// "evictionHard[memory.available]"; empty when the error is not about one field.
	Field string
	Msg   string
}

func (e *Error) Error() string {
	msg := oneLine(e.Msg)
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", oneLine(e.File), msg)
	}
	return fmt.Sprintf("%s: field %s: %s", oneLine(e.File), oneLine(e.Field), msg)
}

// Load reads file (none when empty), merges the *.conf drop-ins directly in dropInDir
// (none when empty or missing) in lexical order, applies the overrides, the kubelet's
// defaults, and validates. Bad input is an *Error.
//
// As the kubelet does, the default evictionHard thresholds are settled on the file
// before the drop-ins merge over it: when the file sets no evictionHard the defaults
// are there for a drop-in to change signal by signal. Every other default applies
// after the last override, to the fields nothing set.
func Load(file, dropInDir string, overrides ...Override) (*Result, error) {
	res := &Result{Sources: []Source{{Kind: SourceDefaults}}}
	var own owners

	base := map[string]any{"apiVersion": APIVersion, "kind": Kind}
	if file != "" {
		raw, err := readFile(file)
		if err != nil {
			return nil, err
		}
		doc, err := parse(file, raw)
		if err != nil {
			return nil, err
		}
		resolveRelativePaths(doc, filepath.Dir(file))
		base = doc
		own.record(file, doc)
		res.Sources = append(res.Sources, Source{Kind: SourceFile, Name: file, SHA256: digest(raw)})
	}
	settleEvictionHard(base)
	strictDefaults(base)
	merged, err := json.Marshal(base)
	if err != nil {
		return nil, fmt.Errorf("encode the configuration file %s: %w", file, err)
	}

	dropIns, err := listDropIns(dropInDir)
	if err != nil {
		return nil, err
	}
	for _, path := range dropIns {
		raw, err := readFile(path)
		if err != nil {
			return nil, err
		}
		doc, err := parse(path, raw)
		if err != nil {
			return nil, err
		}
		if merged, err = mergePatch(merged, doc); err != nil {
			return nil, &Error{File: path, Msg: err.Error()}
		}
		own.record(path, doc)
		res.Sources = append(res.Sources, Source{Kind: SourceDropIn, Name: path, SHA256: digest(raw)})
	}

	for _, o := range overrides {
		doc, err := overrideDoc(o)
		if err != nil {
			return nil, err
		}
		if doc != nil {
			if merged, err = mergePatch(merged, doc); err != nil {
				return nil, &Error{File: o.Name, Msg: err.Error()}
			}
			own.record(o.Name, doc)
		}
		res.Sources = append(res.Sources, Source{Kind: o.Kind, Name: o.Name})
	}

	fallback := file
	if fallback == "" {
		fallback = res.Sources[len(res.Sources)-1].Name
	}
	if fallback == "" {
		fallback = "defaults"
	}

	var kc v1beta1.KubeletConfiguration
	if field, msg := decodeStrict(merged, &kc); msg != "" {
		return nil, &Error{File: own.blame(field, fallback), Field: field, Msg: msg}
	}
	if kc.APIVersion != APIVersion || kc.Kind != Kind {
		// Only an override can get here: files and drop-ins are checked as they are read.
		field := "apiVersion"
		if kc.APIVersion == APIVersion {
			field = "kind"
		}
		return nil, &Error{File: own.blame(field, fallback), Field: field, Msg: "an override may not change apiVersion or kind"}
	}
	defaultFields(&kc)
	if kc.MergeDefaultEvictionSettings != nil && *kc.MergeDefaultEvictionSettings {
		mergeDefaultEvictionHard(&kc)
	}
	if errs := append(Validate(&kc), Unsupported(&kc)...); len(errs) > 0 {
		first := errs[0]
		msg := first.ErrorBody()
		switch n := len(errs) - 1; n {
		case 0:
		case 1:
			msg += " (and 1 more error)"
		default:
			msg += fmt.Sprintf(" (and %d more errors)", n)
		}
		return nil, &Error{File: own.blame(first.Field, fallback), Field: first.Field, Msg: msg}
	}
	out, err := json.Marshal(&kc)
	if err != nil {
		return nil, fmt.Errorf("encode the configuration: %w", err)
	}
	res.Config, res.JSON = &kc, out
	return res, nil
}

// overrideDoc checks an override and returns it as a JSON object (nil when it is empty):
// it must decode strictly into a KubeletConfiguration, so that a wrong name or value names
// the override and the field.
func overrideDoc(o Override) (map[string]any, error) {
	if len(o.Patch) == 0 {
		return nil, nil
	}
	raw, err := json.Marshal(o.Patch)
	if err != nil {
		return nil, &Error{File: o.Name, Msg: "cannot encode as JSON: " + err.Error()}
	}
	var kc v1beta1.KubeletConfiguration
	if field, msg := decodeStrict(raw, &kc); msg != "" {
		return nil, &Error{File: o.Name, Field: field, Msg: msg}
	}
	doc, err := jsonObject(raw)
	if err != nil {
		return nil, &Error{File: o.Name, Msg: err.Error()}
	}
	return doc, nil
}

// mergePatch applies patch to doc as a JSON merge patch (RFC 7386), as the kubelet
// merges its drop-ins.
func mergePatch(doc []byte, patch map[string]any) ([]byte, error) {
	p, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("encode as JSON: %w", err)
	}
	out, err := jsonpatch.MergePatch(doc, p)
	if err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	return out, nil
}

func readFile(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, &Error{File: path, Msg: "cannot read: " + err.Error()}
	}
	return raw, nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// listDropIns returns the regular files (or links to them) named *.conf directly in dir,
// in lexical order.
func listDropIns(dir string) ([]string, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, &Error{File: dir, Msg: "cannot read the drop-in directory: " + err.Error()}
	}
	var out []string
	for _, e := range entries {
		if filepath.Ext(e.Name()) != ".conf" {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Stat(path) // follows links
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, &Error{File: path, Msg: "cannot read: " + err.Error()}
		}
		if fi.Mode().IsRegular() {
			out = append(out, path)
		}
	}
	slices.Sort(out)
	return out, nil
}

// owners remembers which input last set each field, to blame the right one for an error.
// Keys are field paths cut into segments ("evictionHard", "memory.available") and joined
// with a NUL byte; every object key at every depth is recorded, lists and scalars whole.
type owners map[string]string

func (o *owners) record(name string, doc map[string]any) {
	if *o == nil {
		*o = owners{}
	}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		for k, sub := range m {
			key := k
			if prefix != "" {
				key = prefix + "\x00" + k
			}
			(*o)[key] = name
			walk(key, sub)
		}
	}
	walk("", doc)
}

// blame names the input that last set field, or the input that last set a field the
// check compares it with, or else fallback.
func (o owners) blame(field, fallback string) string {
	for _, f := range append([]string{field}, relatedFields(field)...) {
		segs := splitPath(f)
		for i := len(segs); i > 0; i-- {
			if name, ok := o[strings.Join(segs[:i], "\x00")]; ok {
				return name
			}
		}
	}
	return fallback
}

// relatedFields are the fields a cross-field check on field compares it with.
func relatedFields(field string) []string {
	segs := splitPath(field)
	if len(segs) == 0 {
		return nil
	}
	switch segs[0] {
	case "imageGCLowThresholdPercent":
		return []string{"imageGCHighThresholdPercent"}
	case "imageGCHighThresholdPercent":
		return []string{"imageGCLowThresholdPercent"}
	case "imageMaximumGCAge":
		return []string{"imageMinimumGCAge"}
	case "evictionSoftGracePeriod":
		if len(segs) > 1 {
			return []string{"evictionSoft[" + segs[1] + "]"}
		}
	case "maxParallelImagePulls":
		return []string{"serializeImagePulls"}
	case "shutdownGracePeriodCriticalPods", "shutdownGracePeriodByPodPriority":
		return []string{"shutdownGracePeriod"}
	case "preloadedImagesVerificationAllowlist":
		return []string{"imagePullCredentialsVerificationPolicy"}
	case "enableSystemLogQuery":
		return []string{"enableSystemLogHandler"}
	case "cgroupRoot":
		return []string{"systemCgroups"}
	case "systemReservedCgroup", "kubeReservedCgroup":
		return []string{"enforceNodeAllocatable"}
	case "enforceNodeAllocatable":
		return []string{"cgroupsPerQOS"}
	case "tlsCertFile":
		return []string{"tlsPrivateKeyFile"}
	case "tlsPrivateKeyFile":
		return []string{"tlsCertFile"}
	}
	return nil
}

// splitPath cuts a field path such as "a.b[c.d][0].e" into "a", "b", "c.d", "0", "e".
func splitPath(p string) []string {
	var segs []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			segs = append(segs, cur.String())
			cur.Reset()
		}
	}
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '.':
			flush()
		case '[':
			flush()
			end := strings.IndexByte(p[i:], ']')
			if end < 0 {
				end = len(p) - i
			}
			segs = append(segs, p[i+1:i+end])
			i += end
		default:
			cur.WriteByte(p[i])
		}
	}
	flush()
	return segs
}

// oneLine puts s on one line.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
}
