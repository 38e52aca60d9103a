package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/funclen"
)

func TestRunFailsOnALongFunction(t *testing.T) {
	root := t.TempDir()
	body := strings.Repeat("\t_ = 0\n", funclen.Max)
	src := "package p\n\nfunc long() {\n" + body + "}\n"
	if err := os.WriteFile(filepath.Join(root, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run([]string{"-C", root}, &out)
	if err == nil {
		t.Fatalf("run on a %d-line function = nil, want an error", funclen.Max+2)
	}
	if want := "p.go:3: long is 82 lines (at most 80)\n"; out.String() != want {
		t.Errorf("run printed %q, want %q", out.String(), want)
	}
	if err := os.WriteFile(filepath.Join(root, "p.go"), []byte("package p\n\nfunc short() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run([]string{"-C", root}, &out); err != nil || out.Len() > 0 {
		t.Errorf("run on a short function = %v, printed %q; want nil and nothing", err, out.String())
	}
}
