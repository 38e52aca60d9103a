package worker

import (
	"slices"
	"sync"
	"time"
)

// paceWindow is how many recent fulfilment jobs jobPace remembers.
const paceWindow = 32

// jobPace learns when this replica's fulfilment jobs are seen finished, so
// that the polls of a new job come close together near its likely end:
// on the backoff alone they are PollMax apart by then, and a job of a
// steady length that ends just after one poll holds its slot for most of
// a PollMax past its end, every time.
//
// It remembers, for the last paceWindow jobs, how long after the answer
// that created the job the last poll that found it still running was
// sent. A new job is polled on the backoff as before, except that the
// backoff is cut short to poll at the 10th percentile of those times and
// starts again from half a PollInitial there. A job is thus never seen
// later than on the backoff alone (at most PollMax after its end), whether
// jobs get shorter or longer, and a job of a steady length is polled from
// just before its end, half a PollInitial apart at first.
type jobPace struct {
	mu   sync.Mutex
	seen [paceWindow]time.Duration
	n    int // entries of seen in use
	next int // where the next entry goes
}

// near returns how long after its creation answer a new job's backoff is
// cut short (see jobPace), or 0 while no job has been seen finished.
func (p *jobPace) near() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return 0
	}
	s := slices.Clone(p.seen[:p.n])
	slices.Sort(s)
	return s[len(s)/10]
}

// observe records that a finished job was last found running by a poll
// sent d after its creation answer (0 when no poll found it running).
func (p *jobPace) observe(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[p.next] = d
	p.next = (p.next + 1) % paceWindow
	p.n = min(p.n+1, paceWindow)
}
