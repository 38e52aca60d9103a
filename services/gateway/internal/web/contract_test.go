package web_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// pathParam is a path template's parameter: {taskId} in the document,
// {task_id} in the gateway's log.
var pathParam = regexp.MustCompile(`\{[^}]*\}`)

// checkCallsInContract fails t when the pages made a call under /v1/ that
// the served OpenAPI document does not list: it reads the route of every
// request from the gateway's access log and looks its method and path
// template up in /openapi.json. It wants at least min calls, so the check
// cannot pass on no calls at all.
func checkCallsInContract(t *testing.T, st *stacktest.Stack, min int) {
	t.Helper()
	resp, err := http.Get(st.URL(stacktest.Gateway) + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for path, methods := range doc.Paths {
		for m := range methods {
			listed[strings.ToUpper(m)+" "+pathParam.ReplaceAllString(path, "{}")] = true
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
		var line struct{ Msg, Method, Route string }
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Msg != "http request" || !strings.HasPrefix(line.Route, "/v1/") {
			continue
		}
		calls[line.Method+" "+pathParam.ReplaceAllString(line.Route, "{}")]++
	}
	for call := range calls {
		if !listed[call] {
			t.Errorf("the page called %s, which /openapi.json does not list", call)
		}
	}
	if len(calls) < min {
		t.Errorf("%d distinct calls in the gateway's log (%v), want at least %d", len(calls), calls, min)
	}
}
