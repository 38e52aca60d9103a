// Package archtest checks orderflow's floor plan: which layer of the
// repository may import which. It reads the real import graph with
// `go list` and reports every import that crosses a forbidden boundary.
//
// The layers, from the bottom up:
//
//   - pkg/gen: generated contracts; imports nothing of orderflow but itself.
//   - pkg/platform: service plumbing (config, logging, auth, servers).
//   - pkg/engine: the product's Redis and RabbitMQ engines.
//   - pkg/provider: clients of external systems.
//   - pkg/sim: simulators of those systems; only simulator services use them.
//   - pkg/testkit: test kits; only tests use them.
//   - services/<name>: one binary each; no service imports another (Go's
//     internal/ rule already enforces it; the check covers the rest).
//
// Production code (every non-test package outside pkg/sim, pkg/testkit and
// the simulator services) never imports a simulator or a test kit.
package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
)

// Module is the import-path root of every orderflow package.
const Module = "github.com/orderflow/orderflow/"

// SimServices are the services that stand in for external systems.
var SimServices = map[string]bool{"paysim": true, "fulfilmentsim": true}

// Layer is where a package sits in the floor plan.
type Layer struct {
	// Kind is gen, platform, engine, provider, sim, testkit, service,
	// simservice, deploy or external.
	Kind string
	// Service is the service's name for kinds service and simservice.
	Service string
}

// Classify returns the layer of an import path.
func Classify(importPath string) Layer {
	rel, ok := strings.CutPrefix(importPath, Module)
	if !ok {
		return Layer{Kind: "external"}
	}
	parts := strings.Split(rel, "/")
	switch {
	case parts[0] == "pkg" && len(parts) > 1:
		switch parts[1] {
		case "gen", "platform", "engine", "provider", "sim", "testkit":
			return Layer{Kind: parts[1]}
		}
		return Layer{Kind: "pkg-unplaced"}
	case parts[0] == "services" && len(parts) > 1:
		if SimServices[parts[1]] {
			return Layer{Kind: "simservice", Service: parts[1]}
		}
		return Layer{Kind: "service", Service: parts[1]}
	case parts[0] == "deploy":
		return Layer{Kind: "deploy"}
	}
	return Layer{Kind: "pkg-unplaced"}
}

// allowed lists, for each importing layer, the layers its non-test code may
// import (besides external packages and, for services, its own packages).
var allowed = map[string][]string{
	"gen":        {"gen"},
	"platform":   {"gen", "platform"},
	"engine":     {"gen", "platform", "engine"},
	"provider":   {"gen", "platform", "provider"},
	"sim":        {"gen", "platform", "provider", "sim"},
	"testkit":    {"gen", "platform", "engine", "provider", "sim", "testkit"},
	"service":    {"gen", "platform", "engine", "provider"},
	"simservice": {"gen", "platform", "provider", "sim"},
	"deploy":     {"gen", "platform", "testkit", "deploy"},
}

// testAllowed is what test files may import in addition.
var testAllowed = []string{"sim", "testkit"}

// Package is one node of the import graph.
type Package struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// Violation is one forbidden import.
type Violation struct {
	From, To string
	// Test is true when the import is in a test file.
	Test bool
}

func (v Violation) String() string {
	where := ""
	if v.Test {
		where = " (test)"
	}
	return fmt.Sprintf("%s imports %s%s", strings.TrimPrefix(v.From, Module), strings.TrimPrefix(v.To, Module), where)
}

// Check returns every forbidden import among pkgs, sorted.
func Check(pkgs []Package) []Violation {
	var out []Violation
	for _, p := range pkgs {
		from := Classify(p.ImportPath)
		if from.Kind == "external" {
			continue
		}
		for _, imp := range p.Imports {
			if !permitted(from, Classify(imp), false) {
				out = append(out, Violation{From: p.ImportPath, To: imp})
			}
		}
		for _, imp := range append(append([]string(nil), p.TestImports...), p.XTestImports...) {
			if imp == p.ImportPath {
				continue
			}
			if !permitted(from, Classify(imp), true) {
				out = append(out, Violation{From: p.ImportPath, To: imp, Test: true})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func permitted(from, to Layer, test bool) bool {
	if to.Kind == "external" {
		return true
	}
	if from.Kind == "pkg-unplaced" || to.Kind == "pkg-unplaced" {
		return false
	}
	if to.Kind == "service" || to.Kind == "simservice" {
		// A service's packages are its own: nothing else imports them.
		return (from.Kind == "service" || from.Kind == "simservice") && from.Service == to.Service
	}
	for _, k := range allowed[from.Kind] {
		if k == to.Kind {
			return true
		}
	}
	if test {
		for _, k := range testAllowed {
			if k == to.Kind {
				return true
			}
		}
	}
	return false
}

// Load runs `go list` in dir over every module of the workspace and
// returns its packages. overlay, when not empty, is passed as -overlay.
func Load(dir, overlay string) ([]Package, error) {
	mods, err := goCmd(dir, "list", "-f", "{{.Dir}}/...", "-m")
	if err != nil {
		return nil, err
	}
	args := []string{"list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports,Error"}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	args = append(args, strings.Fields(string(mods))...)
	out, err := goCmd(dir, args...)
	if err != nil {
		return nil, err
	}
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			Package
			Error *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decode go list: %w", err)
		}
		if p.Error != nil {
			return nil, fmt.Errorf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p.Package)
	}
	return pkgs, nil
}

func goCmd(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w: %s", args[0], err, stderr.String())
	}
	return out, nil
}
