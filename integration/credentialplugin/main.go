// Command credentialplugin is a kubelet image credential provider plugin for the harness
// (credentialprovider.kubelet.k8s.io/v1): it reads a CredentialProviderRequest on stdin and
// answers with the stack registry's account, cached by registry for $CACHE_DURATION. Each
// run appends the image it was asked about, one line, to $INVOCATIONS_FILE, so that tests
// can count its runs. The harness installs it on nodes whose stack file sets
// imageCredentialProvider.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "credentialplugin:", err)
		os.Exit(1)
	}
}

func run() error {
	env := map[string]string{}
	for _, name := range []string{"REGISTRY", "REGISTRY_USER", "REGISTRY_PASSWORD", "CACHE_DURATION", "INVOCATIONS_FILE"} {
		if env[name] = os.Getenv(name); env[name] == "" {
			return fmt.Errorf("$%s is not set: the CredentialProviderConfig's env must give it", name)
		}
	}
	ttl, err := time.ParseDuration(env["CACHE_DURATION"])
	if err != nil {
		return fmt.Errorf("$CACHE_DURATION: %w", err)
	}
	var req credentialproviderv1.CredentialProviderRequest
	dec := json.NewDecoder(os.Stdin)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return fmt.Errorf("decode the request on stdin: %w", err)
	}
	want := credentialproviderv1.SchemeGroupVersion.String()
	if req.APIVersion != want || req.Kind != "CredentialProviderRequest" || req.Image == "" {
		return fmt.Errorf("request apiVersion %q, kind %q, image %q: want %s, CredentialProviderRequest and an image", req.APIVersion, req.Kind, req.Image, want)
	}
	log, err := os.OpenFile(env["INVOCATIONS_FILE"], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(log, req.Image)
	if err := errors.Join(err, log.Close()); err != nil {
		return fmt.Errorf("record the run: %w", err)
	}
	return json.NewEncoder(os.Stdout).Encode(&credentialproviderv1.CredentialProviderResponse{
		TypeMeta:      metav1.TypeMeta{APIVersion: want, Kind: "CredentialProviderResponse"},
		CacheKeyType:  credentialproviderv1.RegistryPluginCacheKeyType,
		CacheDuration: &metav1.Duration{Duration: ttl},
		Auth: map[string]credentialproviderv1.AuthConfig{
			env["REGISTRY"]: {Username: env["REGISTRY_USER"], Password: env["REGISTRY_PASSWORD"]},
		},
	})
}
