package nodeconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Redacted stands where a secret of the configuration was.
const Redacted = "<redacted>"

// secretFields are the KubeletConfiguration fields that may hold credentials: the
// staticPodURLHeader values (an Authorization header, typically). Their keys stay visible.
var secretFields = []string{"staticPodURLHeader"}

// Redact returns the KubeletConfiguration JSON raw with every secret value replaced by
// Redacted, for readers who are not root: /configz, the bus for non-root callers,
// unitletctl config.
func Redact(raw []byte) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("the KubeletConfiguration is not a JSON object: %w", err)
	}
	changed := false
	for _, f := range secretFields {
		v, ok := doc[f]
		if !ok {
			continue
		}
		var headers map[string][]string
		if err := json.Unmarshal(v, &headers); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for k, vs := range headers {
			for i := range vs {
				vs[i] = Redacted
			}
			headers[k] = vs
		}
		b, err := marshal(headers)
		if err != nil {
			return nil, err
		}
		doc[f], changed = b, true
	}
	if !changed {
		return raw, nil
	}
	return marshal(doc)
}

// marshal is json.Marshal that leaves <, > and & as they are (Redacted has two).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Configz is the body of /configz as the kubelet serves it, {"kubeletconfig": {...}}
// without apiVersion and kind, with the secrets redacted.
func Configz(raw []byte) ([]byte, error) {
	red, err := Redact(raw)
	if err != nil {
		return nil, err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(red, &doc); err != nil {
		return nil, err
	}
	delete(doc, "apiVersion")
	delete(doc, "kind")
	return marshal(map[string]any{"kubeletconfig": doc})
}
