package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// Binary returns the path of a unitlet binary: from UNITLET_BIN_DIR when the Makefile set
// it, else built once per test process from this checkout.
func Binary(name string) (string, error) {
	buildOnce.Do(func() {
		if d := os.Getenv("UNITLET_BIN_DIR"); d != "" {
			binDir = d
			return
		}
		root, err := RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		binDir, buildErr = os.MkdirTemp("", "unitlet-bin-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-trimpath", "-o", binDir+"/", "./cmd/unitlet-config", "./cmd/unitlet-certs", "./cmd/unitlet-volumes", "./cmd/unitletctl")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build the binaries: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		return "", buildErr
	}
	p := filepath.Join(binDir, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s: %w (run `make build`, or unset UNITLET_BIN_DIR to build it here)", p, err)
	}
	return p, nil
}

// RepoRoot is the checkout's top directory.
func RepoRoot() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		if dir := filepath.Dir(filepath.Dir(file)); isRepo(dir) {
			return dir, nil
		}
	}
	// Built with -trimpath (bin/unitlet-harness): the checkout the command runs in.
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if isRepo(d) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("cannot locate the unitlet source tree from %s: run in the checkout", dir)
		}
	}
}

// isRepo reports whether dir is the root of a unitlet checkout.
func isRepo(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "integration", "stacks", "single-node.yaml"))
	return filepath.IsAbs(dir) && err == nil
}

// RequireTool fails with what to install when a command is missing. Tests never skip for a
// missing tool: `make test` installs them (deploy/prereqs.sh).
func RequireTool(name, debianPackage string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not installed: run `apt-get install -y %s` (or `make prereqs`)", name, debianPackage)
	}
	return p, nil
}
