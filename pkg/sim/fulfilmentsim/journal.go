package fulfilmentsim

import (
	"encoding/json"
	"io"
	"time"

	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/sim/journal"
)

// A journal makes the simulator survive a crash like the real fulfilment
// system does: every accepted shipment job (and every reset) is appended
// as one JSON line, written with a single write call so that a process
// killed with SIGKILL leaves whole lines behind. Restore replays it.
// Admin changes of the configuration and the catalogue are not journaled.

// journalEntry is one line of the journal.
type journalEntry struct {
	Reset bool          `json:"reset,omitempty"`
	Job   *journaledJob `json:"job,omitempty"`
	// Created, MaxConcurrent and Seq are the counters after the entry.
	Created       int `json:"created,omitempty"`
	MaxConcurrent int `json:"maxConcurrent,omitempty"`
	Seq           int `json:"seq,omitempty"`
}

// journaledJob is an accepted job: everything needed to settle it again.
type journaledJob struct {
	JobID          string                    `json:"jobId"`
	IdempotencyKey string                    `json:"idempotencyKey"`
	Warehouse      string                    `json:"warehouse"`
	Lines          []fulfilment.ShipmentLine `json:"lines"`
	EndAt          time.Time                 `json:"endAt"`
	Fails          bool                      `json:"fails,omitempty"`
}

// SetJournal makes the simulator append one JSON line per accepted job
// and per reset to w (nil stops it); Restore replays such a journal.
func (s *Server) SetJournal(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.journal = w
}

// appendLocked writes one journal line.
func (s *Server) appendLocked(e journalEntry) { journal.Append(s.journal, e) }

// Restore replays a journal written by a previous run: jobs are accepted
// again with their original ids, idempotency keys, end times and outcomes
// (so a job that ended while the simulator was down ends at once), stock
// is taken again, and the created count carries on. A torn last line is
// ignored. Call it before serving.
func (s *Server) Restore(r io.Reader) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return journal.Replay(r, func(line []byte) {
		var e journalEntry
		if err := json.Unmarshal(line, &e); err != nil {
			return // a line torn by a crash
		}
		switch {
		case e.Reset:
			s.resetLocked()
		case e.Job != nil:
			j := &job{
				Job:       fulfilment.Job{JobID: e.Job.JobID, State: fulfilment.JobRunning},
				warehouse: e.Job.Warehouse,
				lines:     e.Job.Lines,
				endAt:     e.Job.EndAt,
				fails:     e.Job.Fails,
			}
			for _, l := range j.lines {
				if k, ok := s.skus[l.SKU]; ok {
					k.Stock -= l.Quantity
				}
			}
			s.jobs[j.JobID] = j
			s.byKey[e.Job.IdempotencyKey] = j
			s.running[j.JobID] = j
			s.stats.Created = e.Created
			s.stats.MaxConcurrent = max(s.stats.MaxConcurrent, e.MaxConcurrent)
			s.seq = max(s.seq, e.Seq)
		}
	})
}
