package scriptkeys

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// keyRef is a script's reference to a key by its position, KEYS[<n>].
var keyRef = regexp.MustCompile(`KEYS\[(\d+)\]`)

// bindingLine is a line that binds keys to names and does nothing else:
// local a, b = KEYS[1], KEYS[2] (or, in a function library whose helpers
// share the names, a, b = KEYS[1], KEYS[2]).
var bindingLine = regexp.MustCompile(`^\s*(local\s+)?[A-Za-z_]\w*(\s*,\s*[A-Za-z_]\w*)*\s*=\s*KEYS\[\d+\](\s*,\s*KEYS\[\d+\])*\s*$`)

// Unnamed returns, for the Go files of dir (tests left out), every line of
// a string literal (a Lua script or a fragment of one) that addresses a
// key by position outside a binding line, and every literal whose binding
// lines do not bind KEYS[1], KEYS[2], ... in order, each once. Keys bound
// to names once, at the top, are read by name everywhere else, so a
// script's body never needs its KEYS table looked up.
func Unnamed(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	fset := token.NewFileSet()
	var bad []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING || !strings.Contains(lit.Value, "KEYS[") {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			bad = append(bad, checkLiteral(fset.Position(lit.Pos()), s, lit.Value[0] == '`')...)
			return true
		})
	}
	return bad, nil
}

// checkLiteral checks one string literal starting at pos; raw says it is
// a raw string, whose lines are the file's lines.
func checkLiteral(pos token.Position, s string, raw bool) []string {
	var bad []string
	next := 1
	for i, line := range strings.Split(s, "\n") {
		refs := keyRef.FindAllStringSubmatch(line, -1)
		if len(refs) == 0 {
			continue
		}
		at := fmt.Sprintf("%s:%d", filepath.Base(pos.Filename), pos.Line)
		if raw {
			at = fmt.Sprintf("%s:%d", filepath.Base(pos.Filename), pos.Line+i)
		}
		if !bindingLine.MatchString(line) {
			bad = append(bad, fmt.Sprintf("%s: key by position outside the binding lines: %s", at, strings.TrimSpace(line)))
			continue
		}
		for _, r := range refs {
			if n, _ := strconv.Atoi(r[1]); n != next {
				bad = append(bad, fmt.Sprintf("%s: binds KEYS[%d] where KEYS[%d] comes next", at, n, next))
			}
			next++
		}
	}
	return bad
}

// CheckNames fails t for every finding of Unnamed in the calling test's
// package directory.
func CheckNames(t *testing.T) {
	t.Helper()
	bad, err := Unnamed(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
}
