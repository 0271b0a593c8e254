package vmtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryTestAsksForTheVMNode: each test and benchmark of this package calls vmNode first (after
// its constants),
// which boots the guest again when a test before it powered it off. A test that did not
// would find no guest after the power-off test, in whatever order the tests run.
func TestEveryTestAsksForTheVMNode(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil || len(fn.Body.List) == 0 || fn.Name.Name == "TestMain" {
				continue
			}
			if !strings.HasPrefix(fn.Name.Name, "Test") && !strings.HasPrefix(fn.Name.Name, "Benchmark") {
				continue
			}
			if fn.Name.Name == "TestEveryTestAsksForTheVMNode" {
				continue // reads files, needs no node
			}
			if !callsVMNode(firstWork(fn.Body.List)) {
				t.Errorf("%s: %s does not begin with vmNode(t): after the power-off test it would find no guest", fset.Position(fn.Pos()), fn.Name.Name)
			}
		}
	}
}

// firstWork is the first statement that is not a constant's declaration.
func firstWork(list []ast.Stmt) ast.Stmt {
	for _, s := range list {
		if d, ok := s.(*ast.DeclStmt); ok {
			if g, ok := d.Decl.(*ast.GenDecl); ok && g.Tok == token.CONST {
				continue
			}
		}
		return s
	}
	return nil
}

// callsVMNode tells whether the statement calls vmNode (`vmNode(t)`, `n := vmNode(t)`,
// `node := vmNode(t).Name`).
func callsVMNode(s ast.Stmt) bool {
	if s == nil {
		return false
	}
	found := false
	ast.Inspect(s, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "vmNode" {
				found = true
			}
		}
		return !found
	})
	return found
}
