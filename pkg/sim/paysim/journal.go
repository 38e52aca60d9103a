package paysim

import (
	"encoding/json"
	"io"

	"github.com/orderflow/orderflow/pkg/sim/journal"
)

// A journal makes the simulator survive a crash like the real provider
// does: every change of an order's state (created, paid, closed) appends
// the order's record and the counters as one JSON line, written with a
// single write call so that a process killed with SIGKILL leaves whole
// lines behind. Restore replays it; the last line of an order wins.
// Behaviours set by admin calls are not journaled, and counters of calls
// that changed nothing (queries) may be behind after a restore.

// journalEntry is one line of the journal.
type journalEntry struct {
	Order Order `json:"order"`
	Stats Stats `json:"stats"`
	TxSeq int64 `json:"txSeq"`
}

// SetJournal makes the simulator append one JSON line per change of an
// order's state to w (nil stops it); Restore replays such a journal.
func (s *Sim) SetJournal(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.journal = w
}

// persistLocked journals o's current state.
func (s *Sim) persistLocked(o *Order) {
	journal.Append(s.journal, journalEntry{Order: *o, Stats: s.stats, TxSeq: s.txSeq})
}

// Restore replays a journal written by a previous run. A torn last line
// is ignored. Call it before serving.
func (s *Sim) Restore(r io.Reader) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return journal.Replay(r, func(line []byte) {
		var e journalEntry
		if err := json.Unmarshal(line, &e); err != nil || e.Order.OutTradeNo == "" {
			return // a line torn by a crash
		}
		o := e.Order
		s.orders[o.OutTradeNo] = &o
		s.stats, s.txSeq = e.Stats, max(s.txSeq, e.TxSeq)
	})
}
