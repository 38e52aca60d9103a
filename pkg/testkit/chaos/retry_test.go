package chaos_test

import (
	"net/http"
	"testing"
	"time"
)

// answer is one answer a fake post gives resubmit.
type answer struct {
	status   int
	kind, id string
}

// TestResubmitUntilTheAnswerSaysWhatBecameOfTheTask sends a submission
// answered with an error again, as the suite does after the fault: it
// retries while answers are errors of an unavailable gateway or missing,
// and stops at the task's id, at a refusal for good, or at its deadline.
func TestResubmitUntilTheAnswerSaysWhatBecameOfTheTask(t *testing.T) {
	tests := []struct {
		name        string
		answers     []answer
		within      time.Duration
		wantRetries int
		wantKind    string
		wantTaskID  string
	}{
		{
			name:        "503 then no answer then the task",
			answers:     []answer{{503, kindError, ""}, {0, kindUnknown, ""}, {200, kindOK, "t1"}},
			within:      10 * time.Second,
			wantRetries: 3, wantKind: kindOK, wantTaskID: "t1",
		},
		{
			name:        "rate limited then the task",
			answers:     []answer{{http.StatusTooManyRequests, kindError, ""}, {200, kindOK, "t2"}},
			within:      10 * time.Second,
			wantRetries: 2, wantKind: kindOK, wantTaskID: "t2",
		},
		{
			name:        "refused for good",
			answers:     []answer{{400, kindError, ""}},
			within:      10 * time.Second,
			wantRetries: 1, wantKind: kindError,
		},
		{
			name:        "unavailable until the deadline",
			answers:     []answer{{503, kindError, ""}},
			within:      500 * time.Millisecond,
			wantRetries: 2, wantKind: kindError, // 200 ms, then 400 ms passes the 500 ms deadline
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &submission{requestID: "r1", kind: kindError}
			n := 0
			resubmit(s, time.Now().Add(tt.within), func() (int, string, string) {
				a := tt.answers[min(n, len(tt.answers)-1)]
				n++
				return a.status, a.kind, a.id
			})
			if s.retries != tt.wantRetries || s.retryKind != tt.wantKind || s.retryTaskID != tt.wantTaskID {
				t.Errorf("resubmit = %d retries, last %q, task %q; want %d, %q, %q",
					s.retries, s.retryKind, s.retryTaskID, tt.wantRetries, tt.wantKind, tt.wantTaskID)
			}
		})
	}
}

// TestLeftBehindIsATaskItsClientWasNeverTold counts a listed task as
// left behind only when its client has no way to know it: an error
// answer not followed by a retry that told the task's id, a refused
// connection, or a request the load never sent.
func TestLeftBehindIsATaskItsClientWasNeverTold(t *testing.T) {
	listed := task{TaskID: "t1", Status: "TASK_STATUS_SUCCEEDED"}
	tests := []struct {
		name string
		sub  *submission
		want bool
	}{
		{"not the load's request", nil, true},
		{"accepted", &submission{kind: kindOK, taskID: "t1"}, false},
		{"no answer", &submission{kind: kindUnknown}, false},
		{"refused connection", &submission{kind: kindRefused}, true},
		{"error, retry never answered with a task", &submission{kind: kindError, retries: 5, retryKind: kindError}, true},
		{"error, retry told the task", &submission{kind: kindError, retries: 1, retryKind: kindOK, retryTaskID: "t1"}, false},
		{"error, retry told another task", &submission{kind: kindError, retries: 1, retryKind: kindOK, retryTaskID: "t2"}, true},
	}
	for _, tt := range tests {
		if got := leftBehind(tt.sub, listed); got != tt.want {
			t.Errorf("%s: leftBehind = %t, want %t", tt.name, got, tt.want)
		}
	}
}
