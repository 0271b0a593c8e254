package kubeletconfig

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// The group, version and kind every input must declare.
const (
	APIVersion = "kubelet.config.k8s.io/v1beta1"
	Kind       = "KubeletConfiguration"
)

// SourceKind says where a part of the configuration came from.
type SourceKind int

// The kinds of sources, in the order they apply.
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
	// Name is the file's path, or the variables' or flags' names.
	Name string
	// SHA256 is the hex digest of a file's content.
	SHA256 string
}

// Override is a JSON merge patch over the configuration from the environment or the flags,
// e.g. {"maxPods": 50}.
type Override struct {
	Kind  SourceKind
	Name  string
	Patch map[string]any
}

// Result is a loaded configuration.
type Result struct {
	// Config is decoded, defaulted and valid.
	Config *v1beta1.KubeletConfiguration
	// JSON is Config with apiVersion and kind; the same inputs give the same bytes.
	JSON []byte
	// Sources are the inputs in the order they were applied.
	Sources []Source
}

// Error is bad input: one line naming the file (or override) and the field.
type Error struct {
	File  string
	Field string
	Msg   string
}

func (e *Error) Error() string {
	msg := strings.ReplaceAll(e.Msg, "\n", " ")
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", e.File, msg)
	}
	return fmt.Sprintf("%s: field %s: %s", e.File, e.Field, msg)
}

// Load reads file (none when empty), merges the *.conf drop-ins of dropInDir (none when empty
// or missing), applies overrides, the kubelet's defaults, and validates.
func Load(file, dropInDir string, overrides ...Override) (*Result, error) {
	res := &Result{Sources: []Source{{Kind: SourceDefaults}}}
	merged := []byte(`{}`)
	// owner records which input last set each top-level field, to blame the right one.
	owner := map[string]string{}
	blame := func(name string, doc []byte) {
		var m map[string]json.RawMessage
		if json.Unmarshal(doc, &m) == nil {
			for k := range m {
				owner[k] = name
			}
		}
	}

	if file != "" {
		raw, err := readFile(file)
		if err != nil {
			return nil, err
		}
		doc, err := parse(file, raw)
		if err != nil {
			return nil, err
		}
		if doc, err = resolveRelativePaths(file, doc); err != nil {
			return nil, err
		}
		merged = doc
		blame(file, doc)
		res.Sources = append(res.Sources, Source{Kind: SourceFile, Name: file, SHA256: digest(raw)})
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
		if merged, err = jsonpatch.MergePatch(merged, doc); err != nil {
			return nil, &Error{File: path, Msg: "merge: " + err.Error()}
		}
		blame(path, doc)
		res.Sources = append(res.Sources, Source{Kind: SourceDropIn, Name: path, SHA256: digest(raw)})
	}

	for _, o := range overrides {
		patch, err := json.Marshal(o.Patch)
		if err != nil {
			return nil, &Error{File: o.Name, Msg: err.Error()}
		}
		if merged, err = jsonpatch.MergePatch(merged, patch); err != nil {
			return nil, &Error{File: o.Name, Msg: "merge: " + err.Error()}
		}
		blame(o.Name, patch)
		res.Sources = append(res.Sources, Source{Kind: o.Kind, Name: o.Name})
	}

	mainName := file
	if mainName == "" {
		mainName = "configuration"
	}
	whose := func(field string) string {
		top, _, _ := strings.Cut(field, ".")
		top, _, _ = strings.Cut(top, "[")
		if n, ok := owner[top]; ok {
			return n
		}
		return mainName
	}

	var kc v1beta1.KubeletConfiguration
	if field, msg := decodeStrict(merged, &kc); msg != "" {
		return nil, &Error{File: whose(field), Field: field, Msg: msg}
	}
	if kc.APIVersion == "" && kc.Kind == "" {
		kc.APIVersion, kc.Kind = APIVersion, Kind
	}
	Default(&kc)
	if errs := Validate(&kc); len(errs) > 0 {
		first := errs[0]
		msg := first.ErrorBody()
		if len(errs) > 1 {
			msg += fmt.Sprintf(" (and %d more)", len(errs)-1)
		}
		return nil, &Error{File: whose(first.Field), Field: first.Field, Msg: msg}
	}
	out, err := json.Marshal(&kc)
	if err != nil {
		return nil, fmt.Errorf("encode the configuration: %w", err)
	}
	res.Config, res.JSON = &kc, out
	return res, nil
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

// listDropIns returns the *.conf files directly in dir, in lexical order.
func listDropIns(dir string) ([]string, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &Error{File: dir, Msg: "cannot read the drop-in directory: " + err.Error()}
	}
	var out []string
	for _, e := range entries {
		if filepath.Ext(e.Name()) != ".conf" {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Stat(path) // follows symlinks
		if err != nil {
			return nil, &Error{File: path, Msg: "cannot read: " + err.Error()}
		}
		if fi.Mode().IsRegular() {
			out = append(out, path)
		}
	}
	sort.Strings(out)
	return out, nil
}

// parse turns one input, YAML or JSON, into a JSON object, checking its apiVersion and kind
// and that it decodes strictly.
func parse(name string, raw []byte) ([]byte, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, &Error{File: name, Msg: "the file is empty; it needs at least apiVersion: " + APIVersion + " and kind: " + Kind}
	}
	doc, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		msg := oneLine(err.Error())
		if m := duplicateKey.FindStringSubmatch(msg); m != nil {
			return nil, &Error{File: name, Field: m[2], Msg: fmt.Sprintf("set twice (line %s)", m[1])}
		}
		return nil, &Error{File: name, Msg: "not valid YAML or JSON: " + msg}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil || top == nil {
		return nil, &Error{File: name, Msg: "want a KubeletConfiguration object, got " + describe(doc)}
	}
	var tm struct {
		APIVersion any `json:"apiVersion"`
		Kind       any `json:"kind"`
	}
	_ = json.Unmarshal(doc, &tm)
	if tm.APIVersion != APIVersion {
		return nil, &Error{File: name, Field: "apiVersion", Msg: fmt.Sprintf("want %s, got %s", APIVersion, shown(tm.APIVersion))}
	}
	if tm.Kind != Kind {
		return nil, &Error{File: name, Field: "kind", Msg: fmt.Sprintf("want %s, got %s", Kind, shown(tm.Kind))}
	}
	var kc v1beta1.KubeletConfiguration
	if field, msg := decodeStrict(doc, &kc); msg != "" {
		return nil, &Error{File: name, Field: field, Msg: msg}
	}
	return doc, nil
}

// duplicateKey matches the YAML decoder's report of a key set twice.
var duplicateKey = regexp.MustCompile(`line (\d+): key "([^"]*)" already set in map`)

func shown(v any) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprintf("%q", fmt.Sprint(v))
}

func describe(doc []byte) string {
	s := strings.TrimSpace(string(doc))
	switch {
	case s == "null":
		return "nothing"
	case strings.HasPrefix(s, "["):
		return "a list"
	case strings.HasPrefix(s, `"`):
		return "a string"
	}
	return "a scalar"
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// resolveRelativePaths makes the file's relative paths relative to the file's directory, as
// the kubelet does.
func resolveRelativePaths(file string, doc []byte) ([]byte, error) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, &Error{File: file, Msg: err.Error()}
	}
	base := filepath.Dir(file)
	changed := false
	fix := func(obj map[string]any, key string) {
		s, ok := obj[key].(string)
		if ok && s != "" && !filepath.IsAbs(s) {
			obj[key] = filepath.Join(base, s)
			changed = true
		}
	}
	for _, k := range []string{"staticPodPath", "tlsCertFile", "tlsPrivateKeyFile", "resolvConf", "volumePluginDir", "podLogsDir"} {
		fix(m, k)
	}
	if authn, ok := m["authentication"].(map[string]any); ok {
		if x509, ok := authn["x509"].(map[string]any); ok {
			fix(x509, "clientCAFile")
		}
	}
	if !changed {
		return doc, nil
	}
	return json.Marshal(m)
}
