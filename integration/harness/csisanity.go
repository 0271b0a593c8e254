package harness

import (
	"io"
	"os"
	"path/filepath"
)

// CSISanityVersion is the csi-test release whose csi-sanity the harness builds
// (integration/tools/csi-sanity).
const CSISanityVersion = "v5.4.0"

// EnsureCSISanity builds csi-sanity from repo's integration/tools/csi-sanity into the cache
// unless it is there, and returns its path.
func EnsureCSISanity(repo string, out io.Writer) (string, error) {
	bin := filepath.Join(CacheDir(), "csi-sanity-"+CSISanityVersion+"-r1", "csi-sanity")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := goBuild(out, filepath.Join(repo, "integration", "tools", "csi-sanity"), bin,
		[]string{"github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity"}, "-s -w",
		"csi-sanity "+CSISanityVersion+" (first time: about 10 s)"); err != nil {
		return "", err
	}
	return bin, nil
}
