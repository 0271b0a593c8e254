package config

import (
	"encoding/json"
	"net/http"
)

// ServeConfigz serves the configuration in effect as the kubelet's /configz does:
// {"kubeletconfig": {...}}, without apiVersion and kind.
func (s *Service) ServeConfigz(w http.ResponseWriter, r *http.Request) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(s.Current().GetKubeletConfiguration(), &fields); err != nil {
		http.Error(w, "the configuration in effect does not decode: "+err.Error(), http.StatusInternalServerError)
		return
	}
	delete(fields, "apiVersion")
	delete(fields, "kind")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"kubeletconfig": fields})
}
