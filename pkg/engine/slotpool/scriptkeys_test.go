package slotpool

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/orderflow/orderflow/pkg/testkit/scriptkeys"
)

// TestScriptsDeclareTheirKeys runs the package's tests on a Redis of their
// own under MONITOR and fails for every key a script touched without
// declaring it in KEYS (Redis Cluster routes a script by its KEYS).
func TestScriptsDeclareTheirKeys(t *testing.T) {
	fns := map[string]scriptkeys.Function{}
	for o, fn := range poolLibrary.fns {
		fns[o.name] = scriptkeys.Function(fn)
	}
	scriptkeys.CheckPackage(t, fns, "^Test")
}

// TestScriptsNameTheirKeys fails for every key a script addresses by its
// position (KEYS[n]) outside the lines that bind the keys to names.
func TestScriptsNameTheirKeys(t *testing.T) {
	scriptkeys.CheckNames(t)
}

// TestPreludeBindsKeysInConstantOrder: the names preludeKeys binds follow
// the key constants (keyHolders is bound as holdersKey to KEYS[2]), so the
// Go side and the Lua side name a key alike, and libraryState declares
// those names.
func TestPreludeBindsKeysInConstantOrder(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "slotpool.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for _, n := range s.(*ast.ValueSpec).Names {
				if rest, ok := strings.CutPrefix(n.Name, "key"); ok && rest != "" {
					want = append(want, fmt.Sprintf("%sKey = KEYS[%d]", strings.ToLower(rest[:1])+rest[1:], len(want)+1))
				}
			}
		}
	}
	got := strings.Split(strings.TrimSpace(preludeKeys), "\n")
	for i := range got {
		got[i] = strings.TrimSpace(got[i])
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("preludeKeys (-want +got):\n%s", diff)
	}
	for _, b := range want {
		name, _, _ := strings.Cut(b, " ")
		if !regexp.MustCompile(`(?m)^local KEYS, ARGV\n(?s:.*)\b` + name + `\b`).MatchString(libraryState) {
			t.Errorf("libraryState does not declare %s", name)
		}
	}
}
