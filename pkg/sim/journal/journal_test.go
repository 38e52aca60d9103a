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

// TestAppendWritesLinesReplayReads: each Append is one JSON line that
// Replay hands back; a nil journal is written nothing, without a panic.
func TestAppendWritesLinesReplayReads(t *testing.T) {
	var buf bytes.Buffer
	journal.Append(&buf, map[string]int{"a": 1})
	journal.Append(&buf, []string{"b"})
	journal.Append(&buf, func() {}) // does not encode: skipped
	journal.Append(nil, "nothing")
	var got []string
	if err := journal.Replay(&buf, func(line []byte) { got = append(got, string(line)) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != `{"a":1}` || got[1] != `["b"]` {
		t.Errorf("replayed %q, want the two encodable values, one a line", got)
	}
}
