// Package funclen finds Go functions too long to read in one go.
//
// A function of more than a screen mixes its steps; broken into named
// functions, each step says what it does and can be changed alone. Long
// reports every function (a declaration, not a literal) over a limit in
// the Go files under a root, leaving out tests, generated code and the
// test kit.
package funclen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
)

// Max is the most lines a function may take, from its func line to its
// closing brace.
const Max = 80

// Skipped are the directories (relative to the root, slash-separated)
// whose files Long leaves out: generated code and the test kit.
var Skipped = []string{"pkg/gen", "pkg/testkit"}

// Func is a function over the limit.
type Func struct {
	// Pos is file:line of its func keyword, the file relative to the root.
	Pos string
	// Name is the function's name, with its receiver's type for a method
	// (Server.Run).
	Name string
	// Lines is its length.
	Lines int
}

func (f Func) String() string {
	return fmt.Sprintf("%s: %s is %d lines (at most %d)", f.Pos, f.Name, f.Lines, Max)
}

// Long returns the functions longer than max lines in the Go files under
// root, except tests (_test.go), the Skipped directories, and directories
// whose name starts with "." or "_", or is testdata or bin.
func Long(root string, max int) ([]Func, error) {
	var long []Func
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && skipDir(rel, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		found, err := longIn(path, rel, max)
		long = append(long, found...)
		return err
	})
	return long, err
}

func skipDir(rel, name string) bool {
	return strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
		name == "testdata" || name == "bin" || slices.Contains(Skipped, rel)
}

// longIn returns the functions of one file over max lines; rel names the
// file in the answer.
func longIn(path, rel string, max int) ([]Func, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution|parser.ParseComments)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) {
		return nil, nil
	}
	var long []Func
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
		if n := end.Line - start.Line + 1; n > max {
			long = append(long, Func{Pos: fmt.Sprintf("%s:%d", rel, start.Line), Name: funcName(fn), Lines: n})
		}
	}
	return long, nil
}

// funcName is fn's name, with its receiver's type for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
