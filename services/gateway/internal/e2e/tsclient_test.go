package e2e_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/orderflow/orderflow/pkg/testkit/npmtest"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// tsClientDir holds the TypeScript client: its pinned generator, compiler
// and fetch library (package-lock.json) and client.ts.
const tsClientDir = "testdata/tsclient"

// TestGeneratedTypeScriptClient generates a TypeScript client from the
// running gateway's /openapi.json with openapi-typescript, compiles
// client.ts against it with tsc in strict mode, and runs it: it submits an
// order split, polls the task to its result, and reads the typed error
// body of a bad submit.
func TestGeneratedTypeScriptClient(t *testing.T) {
	npmtest.Install(t, tsClientDir, "openapi-typescript")
	st := stacktest.Start(t, stacktest.Options{})
	resp, err := http.Get(st.URL(stacktest.Gateway) + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi.json = %d, %v", resp.StatusCode, err)
	}
	docPath := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(docPath, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	npmtest.Run(t, tsClientDir, nil, "npx", "--no-install", "openapi-typescript", docPath, "-o", "schema.d.ts")
	npmtest.Run(t, tsClientDir, nil, "npx", "--no-install", "tsc", "-p", ".")
	out := npmtest.Run(t, tsClientDir, []string{
		"ORDERFLOW_URL=" + st.URL(stacktest.Gateway), "ORDERFLOW_TOKEN=" + st.DevToken(t, "ts-member"),
	}, "node", "dist/client.js")

	type failure struct {
		ItemCode  string `json:"itemCode"`
		ErrorCode int    `json:"errorCode"`
	}
	var got struct {
		Status    string    `json:"status"`
		Total     int       `json:"total"`
		Succeeded int       `json:"succeeded"`
		Failures  []failure `json:"failures"`
		BadStatus int       `json:"badStatus"`
		BadReason string    `json:"badReason"`
		BadField  string    `json:"badField"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client printed %s: %v", out, err)
	}
	if got.Status != "TASK_STATUS_SUCCEEDED" {
		t.Fatalf("task status = %q (%s), want TASK_STATUS_SUCCEEDED", got.Status, out)
	}
	if diff := cmp.Diff([]failure{{"A4", 10002}}, got.Failures); diff != "" {
		t.Errorf("failures (-want +got):\n%s", diff)
	}
	if got.Total != 2 || got.Succeeded != 1 {
		t.Errorf("result total %d, succeeded %d; want 2 and 1", got.Total, got.Succeeded)
	}
	if got.BadStatus != http.StatusBadRequest || got.BadReason != "INVALID_FIELD" || !strings.Contains(got.BadField, "quantity") {
		t.Errorf("bad submit = %d %q (%s), want 400 INVALID_FIELD naming the quantity", got.BadStatus, got.BadReason, out)
	}
}
