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
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
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
