// A credential provider plugin for the tests: it answers with the user and password of
// its environment for the location its first argument names, and counts its runs in the
// file $COUNT_FILE.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	var req struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Image      string `json:"image"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil || req.Kind != "CredentialProviderRequest" || req.Image == "" {
		fmt.Fprintf(os.Stderr, "bad request %+v: %v\n", req, err)
		os.Exit(1)
	}
	if f := os.Getenv("COUNT_FILE"); f != "" {
		b, _ := os.ReadFile(f)
		_ = os.WriteFile(f, append(b, '.'), 0o644)
	}
	if os.Getenv("FAIL") != "" {
		fmt.Fprintln(os.Stderr, "told to fail")
		os.Exit(3)
	}
	resp := map[string]any{
		"apiVersion":   req.APIVersion,
		"kind":         "CredentialProviderResponse",
		"cacheKeyType": os.Getenv("CACHE_KEY_TYPE"),
		"auth":         map[string]any{os.Args[1]: map[string]string{"username": os.Getenv("PLUGIN_USER"), "password": "for " + req.Image}},
	}
	if d := os.Getenv("CACHE_DURATION"); d != "" {
		resp["cacheDuration"] = d
	}
	_ = json.NewEncoder(os.Stdout).Encode(resp)
}
