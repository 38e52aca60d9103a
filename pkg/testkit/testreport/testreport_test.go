package testreport_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/orderflow/orderflow/pkg/testkit/testreport"
)

// stream is go test -json of three packages: fast passes, slow fails one
// test (in a subtest), skip has no tests; plus a line that is not JSON.
const stream = `{"Action":"start","Package":"ex/fast"}
{"Action":"run","Package":"ex/fast","Test":"TestA"}
{"Action":"output","Package":"ex/fast","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"ex/fast","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"ex/fast","Test":"TestA","Elapsed":0}
{"Action":"output","Package":"ex/fast","Output":"PASS\n"}
{"Action":"output","Package":"ex/fast","Output":"ok  \tex/fast\t1.5s\n"}
{"Action":"pass","Package":"ex/fast","Elapsed":1.5}
{"Action":"run","Package":"ex/slow","Test":"TestB"}
{"Action":"output","Package":"ex/slow","Test":"TestB","Output":"=== RUN   TestB\n"}
{"Action":"output","Package":"ex/slow","Test":"TestB/row","Output":"    b_test.go:9: Get(\"x\") = 1, want 2\n"}
{"Action":"fail","Package":"ex/slow","Test":"TestB/row","Elapsed":0}
{"Action":"output","Package":"ex/slow","Test":"TestB","Output":"--- FAIL: TestB (0.00s)\n"}
{"Action":"fail","Package":"ex/slow","Test":"TestB","Elapsed":0}
{"Action":"output","Package":"ex/slow","Output":"FAIL\n"}
{"Action":"output","Package":"ex/slow","Output":"FAIL\tex/slow\t42.0s\n"}
{"Action":"fail","Package":"ex/slow","Elapsed":42}
{"Action":"output","Package":"ex/none","Output":"?   \tex/none\t[no test files]\n"}
{"Action":"skip","Package":"ex/none","Elapsed":0}
FAIL
`

func TestPrinter(t *testing.T) {
	var out strings.Builder
	p := testreport.NewPrinter(&out)
	if err := p.Read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	p.PrintSlowest(2)
	want := "ok  \tex/fast\t1.5s\n" +
		"=== RUN   TestB\n" +
		"    b_test.go:9: Get(\"x\") = 1, want 2\n" +
		"--- FAIL: TestB (0.00s)\n" +
		"FAIL\tex/slow\t42.0s\n" +
		"?   \tex/none\t[no test files]\n" +
		"FAIL\n" +
		"slowest 2 packages (of 3):\n" +
		"      42.0s  fail  ex/slow\n" +
		"       1.5s  pass  ex/fast\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("printed (-want +got):\n%s", diff)
	}
	wantSlowest := []testreport.Package{
		{Name: "ex/slow", Result: "fail", Elapsed: 42 * time.Second},
		{Name: "ex/fast", Result: "pass", Elapsed: 1500 * time.Millisecond},
		{Name: "ex/none", Result: "skip"},
	}
	if diff := cmp.Diff(wantSlowest, p.Slowest(10)); diff != "" {
		t.Errorf("Slowest(10) (-want +got):\n%s", diff)
	}
}
