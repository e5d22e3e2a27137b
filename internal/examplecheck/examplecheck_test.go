package examplecheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// root is the repository root, from this package's directory.
const root = "../.."

// TestExamplesAreCopyable keeps the examples honest: a user
// copies an Example into a program of their own, so its file must not
// import an internal package (which they cannot import), must declare
// whatever it uses that is not in the package's exported API (no helper
// or address defined in another _test.go file), and must not drop errors.
//
// The error rule is syntactic, without type information: an assignment
// whose last target is the blank identifier (where Go puts the error), and
// a call made for nothing of the methods listed in errorMethods (ours and
// the database and Redis calls the examples make) outside a defer of
// Close or Rollback, the idiomatic clean-ups.
func TestExamplesAreCopyable(t *testing.T) {
	files := exampleFiles(t)
	if len(files) < 10 {
		t.Fatalf("found %d files with Example functions; the walk is broken", len(files))
	}
	for _, path := range files {
		checkFile(t, path)
	}
}

// errorMethods return an error (or a go-redis command holding one) that an
// example must look at.
var errorMethods = map[string]bool{
	"Acquire": true, "TryAcquire": true, "Do": true, "Release": true, "ReleaseToken": true,
	"ForceRelease": true, "Renew": true, "Resign": true, "Campaign": true, "RunJob": true,
	"Inspect": true, "Check": true, "Write": true, "Read": true, "Claim": true, "Migrate": true,
	"Purge": true, "Exec": true, "ExecContext": true, "Scan": true, "Commit": true,
	"Set": true, "Del": true, "Get": true, "Publish": true, "Register": true, "DoAll": true,
	"AcquireRead": true, "AcquireWrite": true, "TryAcquireRead": true, "TryAcquireWrite": true,
}

// exampleFiles returns the _test.go files under root that declare an
// Example function.
func exampleFiles(t *testing.T) []string {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor"):
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if regexp.MustCompile(`(?m)^func Example`).Match(src) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func checkFile(t *testing.T, path string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0) // with object resolution
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, path)
	imports := map[string]bool{} // names the file's imports are used under
	for _, spec := range f.Imports {
		p, _ := strconv.Unquote(spec.Path.Value)
		if strings.Contains(p+"/", "/internal/") {
			t.Errorf("%s: imports %s, which a user's program cannot import", rel, p)
		}
		if spec.Name != nil {
			imports[spec.Name.Name] = true
		} else {
			imports[guessName(p)] = true
		}
	}
	exported := map[string]bool{}
	if !strings.HasSuffix(f.Name.Name, "_test") {
		// An example in the package itself may use its exported API
		// unqualified (a user's copy would add the qualifier).
		exported = packageExports(t, filepath.Dir(path))
	}
	for _, id := range f.Unresolved {
		switch {
		case types.Universe.Lookup(id.Name) != nil, imports[id.Name], exported[id.Name]:
		default:
			t.Errorf("%s:%d: uses %s, declared neither in this file nor in the package's exported API",
				rel, fset.Position(id.Pos()).Line, id.Name)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if id, ok := n.Lhs[len(n.Lhs)-1].(*ast.Ident); ok && id.Name == "_" {
				t.Errorf("%s:%d: assigns its last value (an error, by convention) to _: handle it", rel, fset.Position(n.Pos()).Line)
			}
		case *ast.ExprStmt:
			if name := calledMethod(n.X); errorMethods[name] {
				t.Errorf("%s:%d: calls %s and drops its error", rel, fset.Position(n.Pos()).Line, name)
			}
		case *ast.DeferStmt:
			if name := calledMethod(n.Call); errorMethods[name] {
				t.Errorf("%s:%d: defers %s, dropping its error (call it at the end and look at it)", rel, fset.Position(n.Pos()).Line, name)
			}
		case *ast.GoStmt:
			if name := calledMethod(n.Call); errorMethods[name] {
				t.Errorf("%s:%d: runs %s in a goroutine, dropping its error", rel, fset.Position(n.Pos()).Line, name)
			}
		}
		return true
	})
}

// calledMethod returns the name of the method or function e calls, if e
// is a call; for a chain ending in .Err() (go-redis), the call before it.
func calledMethod(e ast.Expr) string {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return ""
	}
	switch fn := call.Fun.(type) {
	case *ast.SelectorExpr:
		if fn.Sel.Name == "Err" {
			return calledMethod(fn.X)
		}
		return fn.Sel.Name
	case *ast.Ident:
		return fn.Name
	}
	return ""
}

// guessName is the name a package is used under when imported without
// one: the last element of its path, less a major version suffix and a
// "go-" prefix (github.com/redis/go-redis/v9 is redis). An import that
// breaks the rule needs a name in the import.
func guessName(path string) string {
	parts := strings.Split(path, "/")
	name := parts[len(parts)-1]
	if regexp.MustCompile(`^v[0-9]+$`).MatchString(name) && len(parts) > 1 {
		name = parts[len(parts)-2]
	}
	name = strings.TrimPrefix(name, "go-")
	return strings.ReplaceAll(name, "-", "")
}

// packageExports returns the exported top-level names of the non-test
// files of the package in dir.
func packageExports(t *testing.T, dir string) map[string]bool {
	names := map[string]bool{}
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = s.Name.IsExported()
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = n.IsExported()
						}
					}
				}
			}
		}
	}
	return names
}
