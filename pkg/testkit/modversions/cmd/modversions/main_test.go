package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFailsOnADependencyAtTwoVersions builds a workspace of two modules
// that require golang.org/x/sync at two versions: the image of the one
// requiring the older builds it, the workspace builds the newer.
func TestFailsOnADependencyAtTwoVersions(t *testing.T) {
	root := t.TempDir()
	write := func(name, content string) { writeFile(t, root, name, content) }
	write("go.work", "go 1.26.0\n\nuse (\n\t./a\n\t./b\n)\n")
	src := "package %s\n\nimport _ \"golang.org/x/sync/errgroup\"\n"
	for mod, v := range map[string]string{"a": "v0.24.0", "b": "v0.25.0"} {
		write(mod+"/go.mod", "module example.com/"+mod+"\n\ngo 1.26.0\n\nrequire golang.org/x/sync "+v+"\n")
		write(mod+"/"+mod+".go", strings.ReplaceAll(src, "%s", mod))
		tidy(t, filepath.Join(root, mod))
	}

	var out bytes.Buffer
	err := run(context.Background(), []string{"-C", root}, &out)
	if err == nil || !strings.Contains(out.String(), "golang.org/x/sync: ./a v0.24.0, ./b v0.25.0, go.work v0.25.0") {
		t.Errorf("run = %v, output %q; want a failure naming x/sync at v0.24.0 and v0.25.0", err, out.String())
	}

	write("a/go.mod", "module example.com/a\n\ngo 1.26.0\n\nrequire golang.org/x/sync v0.25.0\n")
	tidy(t, filepath.Join(root, "a"))
	out.Reset()
	if err := run(context.Background(), []string{"-C", root}, &out); err != nil {
		t.Errorf("run with one version = %v, output %q; want it to pass", err, out.String())
	}
}

// TestFailsOnARuntimeModuleNeedingATestOnlyModule lays out a repository
// whose service requires golang.org/x/perf (a test-only module): first
// for a package of its own, then only for a test, then not at all.
func TestFailsOnARuntimeModuleNeedingATestOnlyModule(t *testing.T) {
	root := t.TempDir()
	write := func(name, content string) { writeFile(t, root, name, content) }
	remove := func(name string) {
		t.Helper()
		if err := os.Remove(filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	const perf = "golang.org/x/perf v0.0.0-20260908200009-22c9c6c9d4da"
	write("go.work", "go 1.26.0\n\nuse (\n\t./pkg\n\t./services/bad\n)\n")
	write("pkg/go.mod", "module example.com/pkg\n\ngo 1.26.0\n")
	write("pkg/pkg.go", "package pkg\n")
	write("services/bad/go.mod", "module example.com/bad\n\ngo 1.26.0\n\nrequire "+perf+"\n")
	write("services/bad/bad.go", "package bad\n\nimport _ \"golang.org/x/perf/benchmath\"\n")
	tidy(t, filepath.Join(root, "services/bad"))

	var out bytes.Buffer
	err := run(context.Background(), []string{"-C", root}, &out)
	for _, want := range []string{
		"services/bad: golang.org/x/perf: go.mod requires it",
		"services/bad: golang.org/x/perf: needed by example.com/bad -> golang.org/x/perf/benchmath",
	} {
		if err == nil || !strings.Contains(out.String(), want) {
			t.Errorf("run with a package importing x/perf = %v, output %q; want a failure with %q", err, out.String(), want)
		}
	}

	// Needed by a test only: go.mod still requires it, go mod why finds it.
	remove("services/bad/bad.go")
	write("services/bad/bad.go", "package bad\n")
	write("services/bad/bad_test.go", "package bad\n\nimport _ \"golang.org/x/perf/benchmath\"\n")
	tidy(t, filepath.Join(root, "services/bad"))
	out.Reset()
	err = run(context.Background(), []string{"-C", root}, &out)
	if err == nil || !strings.Contains(out.String(), "needed by example.com/bad -> example.com/bad.test -> golang.org/x/perf/benchmath") {
		t.Errorf("run with a test importing x/perf = %v, output %q; want a failure naming the test", err, out.String())
	}

	remove("services/bad/bad_test.go")
	tidy(t, filepath.Join(root, "services/bad"))
	out.Reset()
	if err := run(context.Background(), []string{"-C", root}, &out); err != nil {
		t.Errorf("run without x/perf = %v, output %q; want it to pass", err, out.String())
	}
}

// TestFailsOnARuntimeModuleNeedingChromedp lays out a repository whose
// service has a browser test importing chromedp: in the service's module
// the check fails, naming chromedp in its go.mod and the test that needs
// it; moved into a module nested in the service's directory (as
// services/gateway/browser is), which requires the service with a
// replace, it passes.
func TestFailsOnARuntimeModuleNeedingChromedp(t *testing.T) {
	root := t.TempDir()
	write := func(name, content string) { writeFile(t, root, name, content) }
	const chromedp = "github.com/chromedp/chromedp v0.23.0"
	const browserTest = "package %s\n\nimport (\n\t\"testing\"\n\n\t\"github.com/chromedp/chromedp\"\n)\n\n" +
		"func TestPage(t *testing.T) { _ = chromedp.Navigate(\"about:blank\") }\n"
	write("go.work", "go 1.26.0\n\nuse (\n\t./pkg\n\t./services/web\n)\n")
	write("pkg/go.mod", "module example.com/pkg\n\ngo 1.26.0\n")
	write("pkg/pkg.go", "package pkg\n")
	write("services/web/go.mod", "module example.com/web\n\ngo 1.26.0\n\nrequire "+chromedp+"\n")
	write("services/web/web.go", "package web\n")
	write("services/web/browser_test.go", strings.ReplaceAll(browserTest, "%s", "web"))
	tidy(t, filepath.Join(root, "services/web"))

	var out bytes.Buffer
	err := run(context.Background(), []string{"-C", root}, &out)
	for _, want := range []string{
		"services/web: github.com/chromedp/chromedp: go.mod requires it",
		"services/web: github.com/chromedp/chromedp: needed by example.com/web -> example.com/web.test -> github.com/chromedp/chromedp",
	} {
		if err == nil || !strings.Contains(out.String(), want) {
			t.Errorf("run with a service test importing chromedp = %v, output %q; want a failure with %q", err, out.String(), want)
		}
	}

	// The browser test moves into services/web/browser, a module of its own.
	if err := os.Remove(filepath.Join(root, "services/web/browser_test.go")); err != nil {
		t.Fatal(err)
	}
	write("go.work", "go 1.26.0\n\nuse (\n\t./pkg\n\t./services/web\n\t./services/web/browser\n)\n")
	write("services/web/browser/go.mod", "module example.com/web/browser\n\ngo 1.26.0\n\n"+
		"require (\n\t"+chromedp+"\n\texample.com/web v0.0.0\n)\n\nreplace example.com/web => ../\n")
	write("services/web/browser/doc.go", "package browser\n\nimport _ \"example.com/web\"\n")
	write("services/web/browser/browser_test.go", strings.ReplaceAll(browserTest, "%s", "browser_test"))
	tidy(t, filepath.Join(root, "services/web"))
	tidy(t, filepath.Join(root, "services/web/browser"))
	out.Reset()
	if err := run(context.Background(), []string{"-C", root}, &out); err != nil || strings.Contains(out.String(), "chromedp") {
		t.Errorf("run with chromedp only in services/web/browser = %v, output %q; want it to pass without naming chromedp", err, out.String())
	}
}

// TestRepositoryRuntimeModulesNeedNoTestOnlyModule runs the check on
// this repository.
func TestRepositoryRuntimeModulesNeedNoTestOnlyModule(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-C", "../../../../.."}, &out); err != nil {
		t.Errorf("run on the repository = %v, output:\n%s", err, out.String())
	}
}

// writeFile writes content to name under root, making its directory.
func writeFile(t *testing.T, root, name, content string) {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tidy runs go mod tidy in module directory dir, on its own.
func tidy(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command("go", "mod", "tidy")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go mod tidy in %s: %v\n%s", dir, err, out)
	}
}
