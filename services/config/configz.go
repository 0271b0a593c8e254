package config

import (
	"net/http"

	"github.com/unitlet/unitlet/shared/nodeconfig"
)

// ServeConfigz serves the configuration in effect as the kubelet's /configz does:
// {"kubeletconfig": {...}}, without apiVersion and kind, its secrets redacted.
func (s *Service) ServeConfigz(w http.ResponseWriter, r *http.Request) {
	body, err := nodeconfig.Configz(s.Current().GetKubeletConfiguration())
	if err != nil {
		http.Error(w, "the configuration in effect does not decode: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(body, '\n'))
}
