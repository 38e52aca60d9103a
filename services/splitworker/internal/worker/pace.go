package worker

import (
	"slices"
	"sync"
	"time"
)

// paceWindow is how many recent fulfilment jobs jobPace remembers.
const paceWindow = 32

// jobPace learns when this replica's fulfilment jobs are seen finished, so
// that a new job is first polled near its likely end: polled on the
// backoff alone, a job is seen finished only at the poll after its end,
// which by then comes PollMax apart (a job of a steady length then holds
// its slot for most of a PollMax past its end, every time).
//
// It remembers, for the last paceWindow jobs, how long after the answer
// that created the job the poll that found it finished was sent, and has
// a new job first polled one step (PollInitial) before the 10th
// percentile of those. A job that ends sooner is seen at that first
// poll, late by its distance from the percentile; the polls after it
// back off from half a step. The rule corrects itself: when
// more than a tenth of the jobs are found finished at their first poll,
// those record exactly the first poll's time, and the next first poll
// comes a step earlier.
type jobPace struct {
	mu   sync.Mutex
	seen [paceWindow]time.Duration
	n    int // entries of seen in use
	next int // where the next entry goes
}

// firstPoll returns how long after its creation answer a job is first
// polled: step before the 10th percentile of the recent jobs' finish
// times, 0 (at once) while none is known.
func (p *jobPace) firstPoll(step time.Duration) time.Duration {
	p.mu.Lock()
	if p.n == 0 {
		p.mu.Unlock()
		return 0
	}
	s := slices.Clone(p.seen[:p.n])
	p.mu.Unlock()
	slices.Sort(s)
	return max(0, s[len(s)/10]-step)
}

// observe records that a job was found finished by a poll sent d after
// its creation answer.
func (p *jobPace) observe(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[p.next] = d
	p.next = (p.next + 1) % paceWindow
	p.n = min(p.n+1, paceWindow)
}
