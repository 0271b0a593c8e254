package kubeletconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	sigsjson "sigs.k8s.io/json"
)

// decodeStrict decodes doc into v (a pointer) refusing unknown fields. On failure it returns
// the JSON path of the offending field and what is wrong with it.
func decodeStrict(doc []byte, v any) (field, msg string) {
	if err := strictUnmarshal(doc, v); err == nil {
		return "", ""
	}
	var root any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		return "", err.Error()
	}
	return locate(reflect.TypeOf(v).Elem(), root, "")
}

// strictUnmarshal decodes as the kubelet does: field names match case-sensitively, and an
// unknown or duplicate field is an error.
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

// locate finds the innermost field of value (JSON decoded into any) that does not decode into
// type t, by decoding its parts one at a time.
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
			sub := join(path, k)
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

// leafMessage says why value does not decode into t.
func leafMessage(t reflect.Type, value any) string {
	err := decodeErr(t, value)
	if err == nil {
		return "invalid value"
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("want %s, got %s %s", kindName(t), te.Value, short(value))
	}
	if t.Kind() == reflect.Struct && t.Name() == "Duration" {
		return fmt.Sprintf(`invalid duration %s: want a duration such as "1m30s"`, short(value))
	}
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "json: ")
	return fmt.Sprintf("%s (value %s)", msg, short(value))
}

func short(v any) string {
	b, _ := json.Marshal(v)
	s := string(b)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
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
		if t.Name() == "Duration" {
			return `a duration such as "1m30s"`
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
		jsonName, _, _ := strings.Cut(tag, ",")
		if tag == "-" {
			continue
		}
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

// suggest names a known field that differs from name only by case or a letter or two.
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

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func sortStrings(s []string) { sort.Strings(s) }

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
