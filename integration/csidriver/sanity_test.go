package csidriver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/unitlet/unitlet/integration"
	"github.com/unitlet/unitlet/integration/harness"
)

// TestCSISanity runs csi-sanity, the CSI spec's conformance suite from csi-test (the
// library the kubelet's own CSI tests use), built into the cache from
// integration/tools/csi-sanity, against the harness's test driver in both its modes:
// bind-mounted directories, and ext4 images staged on loop devices. It mounts: run it as
// root (make test does).
func TestCSISanity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("csi-sanity of the test driver mounts and sets up loop devices: run it as root")
	}
	repo, err := integration.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := harness.EnsureCSISanity(repo, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []struct {
		name  string
		stage bool
	}{{"directories", false}, {"staged-ext4", true}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			d, err := Start(Options{
				Name: "sanity.csi.unitlet.test", RegistrationDir: filepath.Join(dir, "registry"), Endpoint: filepath.Join(dir, "csi.sock"),
				NodeID: "node-sanity", StateDir: filepath.Join(dir, "state"), Stage: mode.stage,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(d.Stop)
			run := func() ([]byte, error) {
				cmd := exec.Command(bin, "-csi.endpoint", "unix://"+filepath.Join(dir, "csi.sock"),
					"-csi.mountdir", filepath.Join(dir, "target"), "-csi.stagingdir", filepath.Join(dir, "staging"),
					"-csi.testvolumesize", strconv.Itoa(imageSize), "-ginkgo.no-color")
				return cmd.CombinedOutput()
			}
			out, err := run()
			if err != nil && sanityConnectRace(string(out)) {
				// csi-test's Connect waits for a change from the state it reads after dialing:
				// a connection already Ready by then is waited on for a minute and reported
				// "Connection timed out" (run 19 of 2026-11-29, on a loaded machine), with no
				// call having reached the driver. That is the tool's race, not the driver's:
				// run it once more, saying so.
				t.Logf("csi-sanity: its first connection timed out without reaching the driver (csi-test's connect race); running it again:\n%s", lastLines(string(out), 6))
				out, err = run()
			}
			summary := lastLines(string(out), 6)
			if err != nil {
				t.Fatalf("csi-sanity: %v\n%s", err, out)
			}
			t.Logf("csi-sanity passed:\n%s", summary)
		})
	}
}

// sanityConnectRace reports whether a csi-sanity run failed only because its connection
// helper timed out connecting, in a BeforeEach, before any call reached the driver.
func sanityConnectRace(out string) bool {
	return strings.Contains(out, "Connection timed out") && strings.Contains(out, "STEP: connecting to CSI driver") &&
		strings.Contains(out, "FAIL! -- ") && strings.Contains(out, " Passed | 1 Failed |")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
