package kubeletconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
	sigsjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"
)

// parse turns one file or drop-in, YAML or JSON, into a JSON object, checking its
// apiVersion and kind and that it decodes strictly into a KubeletConfiguration.
func parse(name string, raw []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, &Error{File: name, Msg: "the file is empty; it needs at least apiVersion: " + APIVersion + " and kind: " + Kind}
	}
	js, err := sigsyaml.YAMLToJSONStrict(raw)
	if err != nil {
		msg := oneLine(err.Error())
		if m := duplicateKey.FindStringSubmatch(msg); m != nil {
			field := duplicatePath(raw)
			if field == "" {
				field = m[2]
			}
			return nil, &Error{File: name, Field: field, Msg: fmt.Sprintf("set twice (line %s)", m[1])}
		}
		return nil, &Error{File: name, Msg: "not valid YAML or JSON: " + strings.TrimPrefix(msg, "error converting YAML to JSON: ")}
	}
	doc, err := jsonObject(js)
	if err != nil {
		return nil, &Error{File: name, Msg: err.Error()}
	}
	if v := doc["apiVersion"]; v != APIVersion {
		return nil, &Error{File: name, Field: "apiVersion", Msg: fmt.Sprintf("want %s, got %s", APIVersion, shown(v))}
	}
	if v := doc["kind"]; v != Kind {
		return nil, &Error{File: name, Field: "kind", Msg: fmt.Sprintf("want %s, got %s", Kind, shown(v))}
	}
	var kc v1beta1.KubeletConfiguration
	if field, msg := decodeStrict(js, &kc); msg != "" {
		return nil, &Error{File: name, Field: field, Msg: msg}
	}
	return doc, nil
}

// duplicateKey matches the YAML decoder's report of a key set twice.
var duplicateKey = regexp.MustCompile(`line (\d+): key "((?:[^"\\]|\\.)*)" already set in map`)

// jsonObject decodes a JSON document that must be one object, keeping numbers as written.
func jsonObject(js []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a KubeletConfiguration object, got %s", describe(v))
	}
	return m, nil
}

func shown(v any) string {
	if v == nil {
		return "none"
	}
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return describe(v)
}

// describe names a decoded JSON value for a message: `string "x"`, `number 3`, `a list`.
func describe(v any) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case string:
		return "string " + short(t)
	case json.Number:
		n := string(t)
		if len(n) > 60 {
			n = n[:57] + "..."
		}
		return "number " + n
	case float64:
		return "number " + strconv.FormatFloat(t, 'g', -1, 64)
	case bool:
		return "boolean " + strconv.FormatBool(t)
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func short(s string) string {
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return strconv.Quote(s)
}

// duplicatePath finds the path of the first key that raw (YAML or JSON) sets twice in one
// mapping, in the notation of field paths ("authentication.x509", "evictionHard[a]").
func duplicatePath(raw []byte) string {
	var root yaml.MapSlice
	if yaml.Unmarshal(raw, &root) != nil {
		return ""
	}
	return findDuplicate(reflect.TypeOf(v1beta1.KubeletConfiguration{}), root, "")
}

func findDuplicate(t reflect.Type, v any, path string) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch v := v.(type) {
	case yaml.MapSlice:
		seen := map[string]bool{}
		for _, item := range v {
			key := fmt.Sprint(item.Key)
			sub, subT := childPath(t, path, key)
			if seen[key] {
				return sub
			}
			seen[key] = true
			if p := findDuplicate(subT, item.Value, sub); p != "" {
				return p
			}
		}
	case []any:
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i, e := range v {
			if p := findDuplicate(elem, e, fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	}
	return ""
}

// childPath is the path of key under path, where path holds a value of type t (nil when
// unknown), and the type of the key's value.
func childPath(t reflect.Type, path, key string) (string, reflect.Type) {
	if t != nil && t.Kind() == reflect.Map {
		return fmt.Sprintf("%s[%s]", path, key), t.Elem()
	}
	var ft reflect.Type
	if t != nil && t.Kind() == reflect.Struct {
		ft, _ = fieldType(t, key)
	}
	if path == "" {
		return key, ft
	}
	return path + "." + key, ft
}

// decodeStrict decodes the JSON doc into v (a pointer) as the kubelet does: field names
// match case-sensitively, and an unknown or duplicate field is an error. On failure it
// returns the path of the innermost offending field and what is wrong with it.
func decodeStrict(doc []byte, v any) (field, msg string) {
	if err := strictUnmarshal(doc, v); err == nil {
		return "", ""
	} else if len(bytes.TrimSpace(doc)) == 0 {
		return "", err.Error()
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return "", "not valid JSON: " + err.Error()
	}
	return locate(reflect.TypeOf(v).Elem(), root, "")
}

func strictUnmarshal(doc []byte, v any) error {
	strict, err := sigsjson.UnmarshalStrict(doc, v, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return strict[0]
	}
	return nil
}

// locate finds the innermost part of value (decoded JSON) that does not decode into type
// t, by decoding its parts one at a time.
func locate(t reflect.Type, value any, path string) (string, string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := value.(map[string]any)
		if !ok {
			break
		}
		for _, k := range sortedKeys(obj) {
			ft, found := fieldType(t, k)
			sub, _ := childPath(t, path, k)
			if !found {
				return sub, "unknown field" + suggest(t, k)
			}
			if decodeErr(ft, obj[k]) != nil {
				return locate(ft, obj[k], sub)
			}
		}
	case reflect.Slice, reflect.Array:
		list, ok := value.([]any)
		if !ok {
			break
		}
		for i, e := range list {
			if decodeErr(t.Elem(), e) != nil {
				return locate(t.Elem(), e, fmt.Sprintf("%s[%d]", path, i))
			}
		}
	case reflect.Map:
		obj, ok := value.(map[string]any)
		if !ok {
			break
		}
		for _, k := range sortedKeys(obj) {
			if decodeErr(t.Elem(), obj[k]) != nil {
				return locate(t.Elem(), obj[k], fmt.Sprintf("%s[%s]", path, k))
			}
		}
	}
	return path, leafMessage(t, value)
}

// The types that decode from a string with a syntax of their own.
var (
	durationType = reflect.TypeFor[metav1.Duration]()
	timeType     = reflect.TypeFor[metav1.Time]()
	quantityType = reflect.TypeFor[resource.Quantity]()
)

// leafMessage says why value does not decode into t.
func leafMessage(t reflect.Type, value any) string {
	err := decodeErr(t, value)
	if err == nil {
		return "invalid value"
	}
	if s, isString := value.(string); isString {
		switch t {
		case durationType:
			return fmt.Sprintf(`invalid duration %s: want a duration such as "1m30s"`, short(s))
		case timeType:
			return fmt.Sprintf(`invalid time %s: want RFC 3339 such as "2006-01-02T15:04:05Z"`, short(s))
		case quantityType:
			return fmt.Sprintf(`invalid quantity %s: want a quantity such as "100Mi" or "500m"`, short(s))
		}
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) || isStructOrContainer(t) && !isStructOrContainer(reflect.TypeOf(value)) {
		return fmt.Sprintf("want %s, got %s", kindName(t), describe(value))
	}
	return fmt.Sprintf("%s (got %s)", strings.TrimPrefix(err.Error(), "json: "), describe(value))
}

func isStructOrContainer(t reflect.Type) bool {
	if t == nil {
		return false
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice, reflect.Array:
		return true
	}
	return false
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer (" + t.Kind().String() + ")"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map:
		return "a map"
	case reflect.Struct:
		switch t {
		case durationType:
			return `a duration such as "1m30s"`
		case timeType:
			return "a time (RFC 3339)"
		case quantityType:
			return `a quantity such as "100Mi"`
		}
		return "an object"
	}
	return t.String()
}

func decodeErr(t reflect.Type, value any) error {
	b, err := json.Marshal(value)
	if err != nil {
		return err
	}
	return strictUnmarshal(b, reflect.New(t).Interface())
}

// fieldType finds the Go type of the JSON field name in struct t, looking into inlined
// (embedded) structs as encoding/json does.
func fieldType(t reflect.Type, name string) (reflect.Type, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		jsonName, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && jsonName == "" {
			inner := f.Type
			for inner.Kind() == reflect.Pointer {
				inner = inner.Elem()
			}
			if inner.Kind() == reflect.Struct {
				if ft, ok := fieldType(inner, name); ok {
					return ft, true
				}
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if jsonName == "" {
			jsonName = f.Name
		}
		if jsonName == name {
			return f.Type, true
		}
	}
	return nil, false
}

// suggest names a known field of t that differs from name only by case or a letter or two.
func suggest(t reflect.Type, name string) string {
	best, bestD := "", 3
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			jsonName, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous && jsonName == "" && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			if jsonName == "" || jsonName == "-" {
				continue
			}
			if d := distance(strings.ToLower(jsonName), strings.ToLower(name)); d < bestD {
				best, bestD = jsonName, d
			}
		}
	}
	walk(t)
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// distance is the Levenshtein distance of a and b, given up on above 64 bytes.
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func sortedKeys[K ~string, V any](m map[K]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, string(k))
	}
	slices.Sort(keys)
	return keys
}

// pathFields are the file's fields that hold paths; as the kubelet does, relative ones are
// taken relative to the file's directory.
var pathFields = [][]string{
	{"staticPodPath"},
	{"authentication", "x509", "clientCAFile"},
	{"tlsCertFile"},
	{"tlsPrivateKeyFile"},
	{"resolvConf"},
	{"volumePluginDir"},
	{"podLogsDir"},
}

// resolveRelativePaths makes the relative paths in doc (a decoded file) relative to dir.
func resolveRelativePaths(doc map[string]any, dir string) {
	for _, p := range pathFields {
		obj := doc
		for _, k := range p[:len(p)-1] {
			next, ok := obj[k].(map[string]any)
			if !ok {
				obj = nil
				break
			}
			obj = next
		}
		if obj == nil {
			continue
		}
		key := p[len(p)-1]
		if s, ok := obj[key].(string); ok && s != "" && !filepath.IsAbs(s) {
			obj[key] = filepath.Join(dir, s)
		}
	}
}
