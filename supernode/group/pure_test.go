package group

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCoreIsPure: the core starts no goroutine, reads no clock, sleeps
// never, draws no randomness of its own and depends on nothing of libp2p
// (directly or through another package): it is driven by events, and the
// simulator replays a seed exactly.
func TestCoreIsPure(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	forbiddenImports := map[string]string{
		"math/rand": "randomness comes in with the events", "math/rand/v2": "randomness comes in with the events",
		"crypto/rand": "randomness comes in with the events", "sync": "its owner serialises calls (sync/atomic is allowed for counters)",
		"net": "no I/O", "os": "no I/O",
	}
	forbiddenTime := map[string]bool{"Now": true, "Since": true, "Until": true, "After": true, "AfterFunc": true,
		"NewTimer": true, "NewTicker": true, "Tick": true, "Sleep": true}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if why, bad := forbiddenImports[path]; bad {
				t.Errorf("%s imports %s: %s", name, path, why)
			}
			if strings.Contains(path, "libp2p") {
				t.Errorf("%s imports %s: the core imports nothing of libp2p", name, path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: a go statement at %s: the core starts no goroutine", name, fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == "time" && forbiddenTime[n.Sel.Name] {
					t.Errorf("%s: time.%s at %s: the core reads no clock (now comes with the event)", name, n.Sel.Name, fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "libp2p") || strings.Contains(dep, "multiformats") {
			t.Errorf("the core depends on %s", dep)
		}
	}
}
