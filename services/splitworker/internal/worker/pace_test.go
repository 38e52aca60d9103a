package worker

import (
	"testing"
	"time"
)

func TestJobPaceFirstPoll(t *testing.T) {
	const step = 10 * time.Millisecond
	var p jobPace
	if got := p.firstPoll(step); got != 0 {
		t.Fatalf("firstPoll() with no job seen = %v, want 0 (at once)", got)
	}
	// 32 jobs seen finished 200..231 ms after their creation answer: the
	// 10th percentile is 203 ms, so a new job is first polled at 193 ms.
	for i := range paceWindow {
		p.observe(time.Duration(200+i) * time.Millisecond)
	}
	if got, want := p.firstPoll(step), 193*time.Millisecond; got != want {
		t.Errorf("firstPoll() after 200..231 ms jobs = %v, want %v", got, want)
	}
	// Jobs that turn out shorter are found finished at their first poll,
	// which records the first poll's own time: within a few such jobs the
	// first poll moves a step earlier, and on towards where they end.
	first := p.firstPoll(step)
	for range 8 {
		p.observe(p.firstPoll(step))
	}
	if got := p.firstPoll(step); got > first-step {
		t.Errorf("firstPoll() after 8 jobs found finished at their first poll = %v, want at most %v", got, first-step)
	}
	for range 4 * paceWindow {
		p.observe(max(50*time.Millisecond, p.firstPoll(step)))
	}
	if got, want := p.firstPoll(step), 40*time.Millisecond; got != want {
		t.Errorf("firstPoll() once jobs end by 50 ms = %v, want %v", got, want)
	}
	// Never before the creation answer.
	var q jobPace
	q.observe(time.Millisecond)
	if got := q.firstPoll(step); got != 0 {
		t.Errorf("firstPoll() after a 1 ms job = %v, want 0", got)
	}
}
