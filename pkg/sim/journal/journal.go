// Package journal opens the append-only state file a simulator keeps so
// that it survives a crash like the system it stands in for: the file is
// replayed first, then further lines are appended to it.
package journal

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Open opens (creating it if needed) the journal at path, replays it
// through restore and returns the file, positioned for appending. The
// caller closes it.
func Open(path string, restore func(io.Reader) error) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open state file: %w", err)
	}
	if err := restore(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("restore state from %s: %w", path, err)
	}
	return f, nil
}

// Journaled is a simulator that keeps a journal.
type Journaled interface {
	// Restore replays a journal into the simulator.
	Restore(r io.Reader) error
	// SetJournal makes the simulator append its changes to w.
	SetJournal(w io.Writer)
}

// Attach opens the journal at path (see Open), restores sim from it and
// makes sim append to it. The caller closes the returned file.
func Attach(path string, sim Journaled) (io.Closer, error) {
	f, err := Open(path, sim.Restore)
	if err != nil {
		return nil, err
	}
	sim.SetJournal(f)
	return f, nil
}

// Replay calls apply with each line of r (without the newline), in order.
// Lines up to 4 MiB are read; a line that does not decode is the caller's
// to skip (a crash can tear the last one).
func Replay(r io.Reader, apply func(line []byte)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
	for sc.Scan() {
		apply(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read journal: %w", err)
	}
	return nil
}

// Append writes v to w as one JSON line; with w nil it writes nothing. A
// simulator keeps serving when its journal cannot be written (it only
// loses its memory on a crash), so errors are dropped.
func Append(w io.Writer, v any) {
	if w == nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	_, _ = w.Write(append(b, '\n'))
}
