package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunSavesTheStream copies the stream to -out and reads it back with
// -in: both print the slowest package.
func TestRunSavesTheStream(t *testing.T) {
	stream := `{"Action":"output","Package":"ex/a","Output":"ok  \tex/a\t3.0s\n"}` + "\n" +
		`{"Action":"pass","Package":"ex/a","Elapsed":3}` + "\n"
	saved := filepath.Join(t.TempDir(), "test.json")
	var out strings.Builder
	if err := run([]string{"-out", saved, "-slowest", "1"}, strings.NewReader(stream), &out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != stream {
		t.Errorf("saved %q, want %q", b, stream)
	}
	var again strings.Builder
	if err := run([]string{"-in", saved, "-slowest", "1"}, strings.NewReader(""), &again); err != nil {
		t.Fatal(err)
	}
	for _, got := range []string{out.String(), again.String()} {
		if !strings.Contains(got, "3.0s  pass  ex/a") {
			t.Errorf("printed %q, want the slowest package ex/a", got)
		}
	}
}
