package link

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// The plugins reach a namespace only through NS (Open, OpenContainer,
// OpenIfExists, Current): one route-netlink handle per namespace per
// invocation, with the dump retry. A handle opened elsewhere is how
// multinet's default-route code came to pass address families
// (FAMILY_V4, FAMILY_V6) where netlink.NewHandle wants protocols, which
// opened a USERSOCK and a FIB_LOOKUP socket and left every request to open
// a fresh route socket of its own.
func TestOneWayIntoANamespace(t *testing.T) {
	root := filepath.Join("..", "..")
	var bad []string
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasPrefix(rel, "internal/link/") {
			return nil
		}
		// Plugins and the delegating plugin must not switch threads or
		// open handles themselves; tools (bench, probe) may enter a
		// namespace, but open no handle of their own either.
		plugin := strings.HasPrefix(rel, "plugins/") || strings.HasPrefix(rel, "multinet/")
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			call := pkg.Name + "." + sel.Sel.Name
			switch {
			case pkg.Name == "netlink" && strings.HasPrefix(sel.Sel.Name, "NewHandle"),
				plugin && (call == "netns.Do" || pkg.Name == "vnetns"):
				bad = append(bad, rel+": "+call)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("no Go files read")
	}
	if len(bad) > 0 {
		t.Errorf("namespaces reached outside internal/link (use link.Open/OpenContainer/OpenIfExists/Current):\n%s", strings.Join(bad, "\n"))
	}
}
