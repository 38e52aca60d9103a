package journal_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/orderflow/orderflow/pkg/sim/journal"
)

// lines is a simulator whose state is the lines it was told.
type lines struct {
	restored []byte
	w        io.Writer
}

func (l *lines) Restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	l.restored = b
	return err
}

func (l *lines) SetJournal(w io.Writer) { l.w = w }

func TestAttachRestoresThenAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(path, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sim := &lines{}
	f, err := journal.Attach(path, sim)
	if err != nil {
		t.Fatalf("Attach() = %v", err)
	}
	if string(sim.restored) != "one\n" {
		t.Errorf("restored %q, want %q", sim.restored, "one\n")
	}
	if sim.w == nil {
		t.Fatal("Attach did not set the journal")
	}
	if _, err := io.WriteString(sim.w, "two\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, []byte("one\ntwo\n")) {
		t.Errorf("journal = %q, want %q", got, "one\ntwo\n")
	}
}
