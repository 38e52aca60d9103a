package worker

import (
	"testing"
	"time"
)

func TestJobPaceNear(t *testing.T) {
	var p jobPace
	if got := p.near(); got != 0 {
		t.Fatalf("near() with no job seen = %v, want 0 (the backoff alone)", got)
	}
	// 32 jobs last found running 200..231 ms after their creation answer:
	// the 10th percentile is 203 ms.
	for i := range paceWindow {
		p.observe(time.Duration(200+i) * time.Millisecond)
	}
	if got, want := p.near(), 203*time.Millisecond; got != want {
		t.Errorf("near() after 200..231 ms jobs = %v, want %v", got, want)
	}
	// Jobs got shorter: once a tenth of the window is theirs, near
	// follows them.
	for range 3 {
		p.observe(50 * time.Millisecond)
	}
	if got, want := p.near(), 203*time.Millisecond; got != want {
		t.Errorf("near() after 3 jobs last running at 50 ms = %v, want %v", got, want)
	}
	p.observe(50 * time.Millisecond)
	if got, want := p.near(), 50*time.Millisecond; got != want {
		t.Errorf("near() after 4 jobs last running at 50 ms = %v, want %v", got, want)
	}
	// Jobs finished before their first poll turn it off.
	for range 4 {
		p.observe(0)
	}
	if got := p.near(); got != 0 {
		t.Errorf("near() after 4 jobs never found running = %v, want 0", got)
	}
}
