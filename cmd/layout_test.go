// Package cmd_test keeps the shape the thin mains rely on (docs/architecture.md, "Reading
// order"): each service's Run a wiring list that fits on a screen, no package-level init,
// and the shared libraries free of the process runtime.
package cmd_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxRunLines is the longest a service's Run may be: read the configuration, build the
// parts, register the loops, run.
const maxRunLines = 80

func TestServiceRunIsAShortWiringList(t *testing.T) {
	mains, err := filepath.Glob("../services/*/main.go")
	if err != nil || len(mains) != 6 {
		t.Fatalf("services' main.go: %v %v, want six", mains, err)
	}
	for _, path := range mains {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Name.Name != "Run" {
				continue
			}
			found = true
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxRunLines {
				t.Errorf("%s: Run is %d lines, more than %d: build parts in constructors that take what they need, decide optional parts inside them", path, n, maxRunLines)
			}
		}
		if !found {
			t.Errorf("%s: no Run", path)
		}
	}
}

func TestNoInitOutsideTests(t *testing.T) {
	for _, root := range []string{"../shared", "../services", "."} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, d := range f.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "init" {
					t.Errorf("%s: func init(): build what it sets up in a function its users call", path)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestSharedLibrariesDoNotImportTheDaemon keeps shared/'s libraries usable outside a
// service process (unitletctl, the harness, tests): only the services import the process
// runtime.
func TestSharedLibrariesDoNotImportTheDaemon(t *testing.T) {
	const daemon = "github.com/unitlet/unitlet/shared/daemon"
	for _, lib := range []string{"bus", "pki", "nodeconfig", "envconfig", "kubeapi", "kube", "restart", "checkpoint", "cri", "nodeinfo"} {
		pkg := "github.com/unitlet/unitlet/shared/" + lib
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == daemon {
				t.Errorf("%s imports %s (go list -deps shows the path): take what it needs as a parameter or an interface", pkg, daemon)
			}
		}
	}
}
