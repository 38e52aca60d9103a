package browser_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// pathParam is a path template's parameter: {taskId} in the document,
// {task_id} in the gateway's log.
var pathParam = regexp.MustCompile(`\{[^}]*\}`)

// checkCallsInContract fails t when the pages made a call under /v1/ that
// the served OpenAPI document does not list, or got an answer whose status
// the document does not list for that operation: it reads the route and
// status of every request from the gateway's access log and looks them up
// in /openapi.json. It wants at least min calls, so the check
// cannot pass on no calls at all.
func checkCallsInContract(t *testing.T, st *stacktest.Stack, min int) {
	t.Helper()
	resp, err := http.Get(st.URL(stacktest.Gateway) + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]any `json:"responses"`
		} `json:"paths"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	// listed holds each operation's documented statuses.
	listed := map[string]map[string]any{}
	for path, methods := range doc.Paths {
		for m, op := range methods {
			listed[strings.ToUpper(m)+" "+pathParam.ReplaceAllString(path, "{}")] = op.Responses
		}
	}
	f, err := os.Open(st.LogPath(stacktest.Gateway))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	calls := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg, Method, Route string
			Code               int
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Msg != "http request" || !strings.HasPrefix(line.Route, "/v1/") {
			continue
		}
		call := line.Method + " " + pathParam.ReplaceAllString(line.Route, "{}")
		calls[call]++
		statuses, ok := listed[call]
		if !ok {
			if calls[call] == 1 {
				t.Errorf("the page called %s, which /openapi.json does not list", call)
			}
			continue
		}
		// Every answer the gateway gave is one the document describes.
		if _, ok := statuses[strconv.Itoa(line.Code)]; !ok {
			t.Errorf("%s answered %d, which /openapi.json does not list for it", call, line.Code)
		}
	}
	if len(calls) < min {
		t.Errorf("%d distinct calls in the gateway's log (%v), want at least %d", len(calls), calls, min)
	}
}
