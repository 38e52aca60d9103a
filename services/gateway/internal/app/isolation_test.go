package app

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAnotherMembersTaskIsInvisibleToListAndWatch: a member's list never
// shows another member's task, and watching another member's task answers
// 404 like a task that does not exist.
func TestAnotherMembersTaskIsInvisibleToListAndWatch(t *testing.T) {
	s := startGateway(t, nil)
	alice, mallory := s.token(t, "alice"), s.token(t, "mallory")
	code, body := s.do(t, "POST", "/v1/order-splits", alice, goodOrder)
	if code != http.StatusOK {
		t.Fatalf("submit = %d %v", code, body)
	}
	id := body["taskId"].(string)
	code, list := s.do(t, "GET", "/v1/tasks", mallory, "")
	if code != http.StatusOK {
		t.Fatalf("mallory's list = %d %v", code, list)
	}
	if tasks, _ := list["tasks"].([]any); len(tasks) != 0 {
		t.Errorf("mallory's list = %v, want empty (alice's task must not show)", tasks)
	}
	watch := func(token, taskID string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+s.addrs.HTTP+"/v1/tasks/"+taskID+":watch", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, string(raw)
	}
	otherCode, otherBody := watch(mallory, id)
	missingCode, missingBody := watch(mallory, "AAAAAAAAAAAAAAAAAAAAAA")
	if otherCode != missingCode || !strings.Contains(otherBody, "TASK_NOT_FOUND") || !strings.Contains(missingBody, "TASK_NOT_FOUND") {
		t.Errorf("mallory watching alice's task = %d %s; unknown task = %d %s; want the same not-found answer", otherCode, otherBody, missingCode, missingBody)
	}
}
