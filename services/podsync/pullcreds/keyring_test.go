package pullcreds

import (
	"slices"
	"testing"
)

func users(auths []Auth) []string {
	var out []string
	for _, a := range auths {
		out = append(out, a.Username)
	}
	return out
}

func TestKeyringLookup(t *testing.T) {
	k := &Keyring{}
	for loc, user := range map[string]string{
		"registry.example:5000":                "port",
		"registry.example":                     "host",
		"https://registry.example/team":        "team",
		"registry.example/team/app":            "app",
		"*.cloud.example":                      "wildcard",
		"https://index.docker.io/v1/":          "hub",
		"http://plain.example/v2/":             "plain",
		"registry.example/teammate-not-prefix": "other",
	} {
		if !k.Add(loc, Auth{Username: user}) {
			t.Fatalf("Add(%q) refused", loc)
		}
	}
	for _, tc := range []struct {
		repo string
		want []string
	}{
		// The most specific path first, then its prefixes, then the bare host.
		{"registry.example/team/app", []string{"app", "team", "host"}},
		{"registry.example/team/db", []string{"team", "host"}},
		{"registry.example/solo", []string{"host"}},
		// A port must be the same on both sides.
		{"registry.example:5000/x", []string{"port"}},
		{"registry.example:5001/x", nil},
		// A wildcard stands for one label, no more.
		{"eu.cloud.example/x", []string{"wildcard"}},
		{"a.eu.cloud.example/x", nil},
		{"cloud.example/x", nil},
		// Docker Hub's images, whatever alias names them.
		{"docker.io/library/busybox", []string{"hub"}},
		{"index.docker.io/library/busybox", []string{"hub"}},
		{"plain.example/x", []string{"plain"}},
		{"unknown.example/x", nil},
	} {
		if got := users(k.Lookup(tc.repo)); !slices.Equal(got, tc.want) {
			t.Errorf("Lookup(%q) = %v, want %v", tc.repo, got, tc.want)
		}
	}
}

func TestKeyringSameLocationKeepsEveryCredential(t *testing.T) {
	k := &Keyring{}
	k.Add("registry.example", Auth{Username: "a"})
	k.Add("https://registry.example", Auth{Username: "b"})
	if got := users(k.Lookup("registry.example/x")); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Lookup = %v, want [a b] in the order added", got)
	}
	if k.Len() != 2 {
		t.Errorf("Len = %d, want 2", k.Len())
	}
}

func TestRepository(t *testing.T) {
	for image, want := range map[string]string{
		"busybox":                          "docker.io/library/busybox",
		"busybox:1.36":                     "docker.io/library/busybox",
		"user/app@sha256:" + sha:           "docker.io/user/app",
		"127.0.0.1:5000/private/busybox:1": "127.0.0.1:5000/private/busybox",
		"registry.example/team/app:v1":     "registry.example/team/app",
		"localhost/app":                    "localhost/app",
	} {
		got, err := Repository(image)
		if err != nil || got != want {
			t.Errorf("Repository(%q) = %q, %v; want %q", image, got, err, want)
		}
	}
	if _, err := Repository("Not/Valid"); err == nil {
		t.Error("Repository of an upper-case name: no error")
	}
}

const sha = "0000000000000000000000000000000000000000000000000000000000000000"
