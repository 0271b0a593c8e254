package nodeconfig

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRedactHidesHeaderValues(t *testing.T) {
	raw := []byte(`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","maxPods":110,"staticPodURL":"https://pods.example/x","staticPodURLHeader":{"Authorization":["Bearer s3cr3t"],"X-Two":["a","b"]}}`)
	red, err := Redact(raw)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(red), "s3cr3t") {
		t.Fatalf("the token is still there: %s", red)
	}
	var got struct {
		MaxPods int                 `json:"maxPods"`
		Header  map[string][]string `json:"staticPodURLHeader"`
	}
	if err := json.Unmarshal(red, &got); err != nil {
		t.Fatal(err)
	}
	if got.MaxPods != 110 || len(got.Header["Authorization"]) != 1 || got.Header["Authorization"][0] != Redacted || len(got.Header["X-Two"]) != 2 {
		t.Errorf("redacted: %s; want the header names kept, each value %s, the rest untouched", red, Redacted)
	}
	z, err := Configz(raw)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(z), "s3cr3t") || strings.Contains(string(z), "apiVersion") || !strings.HasPrefix(string(z), `{"kubeletconfig":{`) {
		t.Errorf("configz: %s", z)
	}
	// Nothing secret: the input as it was.
	plain := []byte(`{"maxPods":3}`)
	if out, err := Redact(plain); err != nil || string(out) != string(plain) {
		t.Errorf("Redact(%s) = %s, %v", plain, out, err)
	}
	for _, bad := range []string{`[]`, `{"staticPodURLHeader":"x"}`} {
		if _, err := Redact([]byte(bad)); err == nil {
			t.Errorf("Redact(%s): no error", bad)
		}
	}
}
