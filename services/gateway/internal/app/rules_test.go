package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	"github.com/orderflow/orderflow/pkg/platform/rules"
)

// The caps the rule tests start the gateway with, to show that the
// deployment's values are the ones enforced and documented.
const (
	testMaxItems    = 3
	testMaxQuantity = 50
)

// ruleCase is one request through both transports: REST (method, path,
// body) and gRPC (the same request as protojson), with the field path the
// refusal must name ("" when the request must pass validation).
type ruleCase struct {
	name       string
	rpc        string
	httpMethod string
	httpPath   string
	body       string
	grpcJSON   string
	wantField  string
}

func splitCase(name, body, wantField string) ruleCase {
	return ruleCase{name, gatewayv1.OrderSplitService_CreateOrderSplit_FullMethodName, "POST", "/v1/order-splits", body, body, wantField}
}

func payCase(name, body, wantField string) ruleCase {
	return ruleCase{name, gatewayv1.PaymentService_CreatePayment_FullMethodName, "POST", "/v1/payments", body, body, wantField}
}

func item(code, sku string, qty int) string {
	return fmt.Sprintf(`{"itemCode":%q,"sku":%q,"quantity":%d}`, code, sku, qty)
}

func order(code string, items ...string) string {
	return fmt.Sprintf(`{"orderCode":%q,"items":[%s]}`, code, strings.Join(items, ","))
}

var ruleCases = []ruleCase{
	splitCase("order at every bound", order(strings.Repeat("O", 64), item("a", strings.Repeat("S", 64), testMaxQuantity), item(strings.Repeat("b", 64), "S", 1), item("c-_9", "S", 1)), ""),
	splitCase("order code empty", order("", item("a", "S", 1)), "orderCode"),
	splitCase("order code too long", order(strings.Repeat("O", 65), item("a", "S", 1)), "orderCode"),
	splitCase("order code bad character", order("O 1", item("a", "S", 1)), "orderCode"),
	splitCase("request id too long", `{"orderCode":"O","requestId":"`+strings.Repeat("r", 65)+`","items":[`+item("a", "S", 1)+`]}`, "requestId"),
	splitCase("request id bad character", `{"orderCode":"O","requestId":"r/1","items":[`+item("a", "S", 1)+`]}`, "requestId"),
	splitCase("priority out of the enum", `{"orderCode":"O","priority":7,"items":[`+item("a", "S", 1)+`]}`, "priority"),
	splitCase("no items", order("O"), "items"),
	splitCase("items over the cap", order("O", item("a", "S", 1), item("b", "S", 1), item("c", "S", 1), item("d", "S", 1)), "items"),
	splitCase("item code empty", order("O", item("a", "S", 1), item("", "S", 1)), "items[1].itemCode"),
	splitCase("item code bad character", order("O", item("a", "S", 1), item("b", "S", 1), item("c.d", "S", 1)), "items[2].itemCode"),
	splitCase("item code too long", order("O", item(strings.Repeat("i", 65), "S", 1)), "items[0].itemCode"),
	splitCase("item code repeated", order("O", item("a", "S", 1), item("a", "T", 1)), "items[1].itemCode"),
	splitCase("sku empty", order("O", item("a", "S", 1), item("b", "", 1)), "items[1].sku"),
	splitCase("sku too long", order("O", item("a", strings.Repeat("S", 65), 1)), "items[0].sku"),
	splitCase("sku bad character", order("O", item("a", "S%", 1)), "items[0].sku"),
	splitCase("quantity zero", order("O", item("a", "S", 1), item("b", "S", 1), item("c", "S", 0)), "items[2].quantity"),
	splitCase("quantity negative", order("O", item("a", "S", -1)), "items[0].quantity"),
	splitCase("quantity over the cap", order("O", item("a", "S", testMaxQuantity+1)), "items[0].quantity"),
	{"page size at max", gatewayv1.TaskService_ListTasks_FullMethodName, "GET", "/v1/tasks?pageSize=100", "", `{"pageSize":100}`, ""},
	{"page size over", gatewayv1.TaskService_ListTasks_FullMethodName, "GET", "/v1/tasks?pageSize=101", "", `{"pageSize":101}`, "pageSize"},
	{"page size negative", gatewayv1.TaskService_ListTasks_FullMethodName, "GET", "/v1/tasks?pageSize=-1", "", `{"pageSize":-1}`, "pageSize"},
	payCase("payment at every bound", `{"orderCode":"`+strings.Repeat("P", 32)+`","amountFen":100000000,"description":"`+strings.Repeat("茶", 127)+`"}`, ""),
	payCase("payment order code empty", `{"amountFen":1}`, "orderCode"),
	payCase("payment order code too long", `{"orderCode":"`+strings.Repeat("P", 33)+`","amountFen":1}`, "orderCode"),
	payCase("payment order code bad character", `{"orderCode":"P.1","amountFen":1}`, "orderCode"),
	payCase("amount zero", `{"orderCode":"P1","amountFen":0}`, "amountFen"),
	payCase("amount over", `{"orderCode":"P1","amountFen":"100000001"}`, "amountFen"),
	payCase("description too long", `{"orderCode":"P1","amountFen":1,"description":"`+strings.Repeat("茶", 128)+`"}`, "description"),
	{"payment read, order code too long", gatewayv1.PaymentService_GetPayment_FullMethodName, "GET", "/v1/payments/" + strings.Repeat("P", 33), "", `{"orderCode":"` + strings.Repeat("P", 33) + `"}`, "orderCode"},
	{"payment read, order code bad character", gatewayv1.PaymentService_GetPayment_FullMethodName, "GET", "/v1/payments/P~1", "", `{"orderCode":"P~1"}`, "orderCode"},
}

// requests are the gRPC request types of the methods with rules.
var requests = map[string]func() proto.Message{
	gatewayv1.OrderSplitService_CreateOrderSplit_FullMethodName: func() proto.Message { return &gatewayv1.CreateOrderSplitRequest{} },
	gatewayv1.TaskService_ListTasks_FullMethodName:              func() proto.Message { return &gatewayv1.ListTasksRequest{} },
	gatewayv1.PaymentService_CreatePayment_FullMethodName:       func() proto.Message { return &gatewayv1.CreatePaymentRequest{} },
	gatewayv1.PaymentService_GetPayment_FullMethodName:          func() proto.Message { return &gatewayv1.GetPaymentRequest{} },
}

var indexRE = regexp.MustCompile(`\[\d+\]`)

// TestEveryRuleThroughRESTAndGRPC sends a request breaking each rule of the
// gateway's tables (and one at every bound) through the real REST and gRPC
// servers: a refusal is INVALID_ARGUMENT (400) whose ErrorInfo
// metadata.field and BadRequest violation name the field's path; a request
// at the bounds passes validation. Every rule of the tables has a case.
func TestEveryRuleThroughRESTAndGRPC(t *testing.T) {
	s := startGateway(t, func(c *Config) { c.MaxItems, c.MaxQuantity = testMaxItems, testMaxQuantity })
	tok := s.token(t, "alice")

	covered := map[string]bool{}
	for _, tc := range ruleCases {
		if tc.wantField != "" {
			covered[tc.rpc+" "+indexRE.ReplaceAllString(tc.wantField, "[]")] = true
		}
	}
	for _, tab := range rules.Gateway(rules.NewOrderSplit(testMaxItems, testMaxQuantity)) {
		for _, r := range tab.Rules {
			if !covered[tab.Method+" "+r.Field] {
				t.Errorf("no case breaks the rule of %s in %s", r.Field, tab.Method)
			}
		}
	}

	conn, err := grpc.NewClient(s.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)

	for _, tc := range ruleCases {
		t.Run(tc.name+"/REST", func(t *testing.T) {
			code, body := s.do(t, tc.httpMethod, tc.httpPath, tok, tc.body)
			if tc.wantField == "" {
				if code == http.StatusBadRequest {
					t.Errorf("%s %s = 400 %v, want it past validation", tc.httpMethod, tc.httpPath, body)
				}
				return
			}
			if code != http.StatusBadRequest || reason(body) != "INVALID_FIELD" || field(body) != tc.wantField {
				t.Errorf("%s %s = %d %v, want 400 INVALID_FIELD naming %s", tc.httpMethod, tc.httpPath, code, body, tc.wantField)
			}
		})
		t.Run(tc.name+"/gRPC", func(t *testing.T) {
			req := requests[tc.rpc]()
			if err := protojson.Unmarshal([]byte(tc.grpcJSON), req); err != nil {
				t.Fatalf("case %s: %v", tc.grpcJSON, err)
			}
			err := conn.Invoke(ctx, tc.rpc, req, &emptypb.Empty{}) // the answer's fields are kept as unknown ones

			if tc.wantField == "" {
				if status.Code(err) == codes.InvalidArgument {
					t.Errorf("%s = %v, want it past validation", tc.rpc, err)
				}
				return
			}
			info, violation := grpcField(err)
			if status.Code(err) != codes.InvalidArgument || info != tc.wantField || violation != tc.wantField {
				t.Errorf("%s = %v (ErrorInfo field %q, BadRequest field %q), want INVALID_ARGUMENT naming %s", tc.rpc, err, info, violation, tc.wantField)
			}
		})
	}
}

func grpcField(err error) (info, violation string) {
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d.GetMetadata()["field"]
		case *errdetails.BadRequest:
			if v := d.GetFieldViolations(); len(v) > 0 {
				violation = v[0].GetField()
			}
		}
	}
	return info, violation
}

// schemaOf names where the served document states each rule: a property
// of a schema of the components, or a parameter of an operation.
var schemaOf = map[string]string{
	"CreateOrderSplit orderCode":        "schemas v1CreateOrderSplitRequest orderCode",
	"CreateOrderSplit requestId":        "schemas v1CreateOrderSplitRequest requestId",
	"CreateOrderSplit items":            "schemas v1CreateOrderSplitRequest items",
	"CreateOrderSplit items[].itemCode": "schemas v1OrderItem itemCode",
	"CreateOrderSplit items[].sku":      "schemas v1OrderItem sku",
	"CreateOrderSplit items[].quantity": "schemas v1OrderItem quantity",
	"ListTasks pageSize":                "parameter /v1/tasks get pageSize",
	"CreatePayment orderCode":           "schemas v1CreatePaymentRequest orderCode",
	"CreatePayment amountFen":           "schemas v1CreatePaymentRequest amountFen",
	"CreatePayment description":         "schemas v1CreatePaymentRequest description",
	"GetPayment orderCode":              "parameter /v1/payments/{orderCode} get orderCode",
}

// TestServedOpenAPIShowsEveryRule reads /openapi.json from a running
// gateway and finds each rule of the tables, with the deployment's caps, in
// the schema of its field.
func TestServedOpenAPIShowsEveryRule(t *testing.T) {
	s := startGateway(t, func(c *Config) { c.MaxItems, c.MaxQuantity = testMaxItems, testMaxQuantity })
	resp, err := http.Get("http://" + s.addrs.HTTP + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var doc struct {
		Paths      map[string]map[string]struct{ Parameters []map[string]any }
		Components struct {
			Schemas map[string]struct{ Properties map[string]map[string]any }
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("GET /openapi.json = %d %.200s: %v", resp.StatusCode, raw, err)
	}
	seen := 0
	for _, tab := range rules.Gateway(rules.NewOrderSplit(testMaxItems, testMaxQuantity)) {
		method := tab.Method[strings.LastIndexByte(tab.Method, '/')+1:]
		for _, r := range tab.Rules {
			where, ok := schemaOf[method+" "+r.Field]
			if !ok {
				t.Errorf("%s %s: the test does not know where the document states it", method, r.Field)
				continue
			}
			seen++
			w := strings.Fields(where)
			var schema map[string]any
			if w[0] == "schemas" {
				schema = doc.Components.Schemas[w[1]].Properties[w[2]]
			} else {
				for _, p := range doc.Paths[w[1]][w[2]].Parameters {
					if p["name"] == w[3] {
						schema, _ = p["schema"].(map[string]any)
					}
				}
			}
			want := map[string]any{}
			switch r.Kind {
			case rules.Text:
				want["maxLength"] = float64(r.Max)
				if r.Min > 0 {
					want["minLength"] = float64(r.Min)
				}
				if r.Chars != nil {
					want["pattern"] = r.Chars.Pattern()
				}
			case rules.Int:
				want["minimum"], want["maximum"] = float64(r.Min), float64(r.Max)
			case rules.List:
				want["minItems"], want["maxItems"] = float64(r.Min), float64(r.Max)
			}
			for k, v := range want {
				if schema[k] != v {
					t.Errorf("%s %s: %s = %v in the served document, want %v", method, r.Field, k, schema[k], v)
				}
			}
		}
	}
	if seen != len(schemaOf) {
		t.Errorf("%d rules found in the tables, %d places listed here", seen, len(schemaOf))
	}
	// The caps are the deployment's.
	if got := doc.Components.Schemas["v1CreateOrderSplitRequest"].Properties["items"]["maxItems"]; got != float64(testMaxItems) {
		t.Errorf("items maxItems = %v, want the configured %d", got, testMaxItems)
	}
	if got := doc.Components.Schemas["v1OrderItem"].Properties["quantity"]["maximum"]; got != float64(testMaxQuantity) {
		t.Errorf("quantity maximum = %v, want the configured %d", got, testMaxQuantity)
	}
	if re, _ := doc.Components.Schemas["v1OrderItem"].Properties["sku"]["pattern"].(string); !regexp.MustCompile(re).MatchString("SKU-1_a") || regexp.MustCompile(re).MatchString("SKU 1") {
		t.Errorf("sku pattern %q does not say what the gateway accepts", re)
	}
}

// TestServedOpenAPIStatesTheBodyLimit: every operation that takes a body
// lists the 413 the gateway answers to an oversized one, with its reason.
func TestServedOpenAPIStatesTheBodyLimit(t *testing.T) {
	s := startGateway(t, nil)
	resp, err := http.Get("http://" + s.addrs.HTTP + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	type response struct {
		Ref         string `json:"$ref"`
		Description string
		Content     map[string]struct {
			Schema struct {
				Ref string `json:"$ref"`
			}
		}
	}
	var doc struct {
		Paths      map[string]map[string]struct{ Responses map[string]response }
		Components struct{ Responses map[string]response }
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	posts := 0
	for path, ops := range doc.Paths {
		if path == "/v1/payments/notify" {
			continue // the provider's callback: its own fixed limit
		}
		for verb, op := range ops {
			if verb != "post" && verb != "put" {
				continue
			}
			posts++
			r, ok := op.Responses["413"]
			if !ok {
				t.Errorf("%s %s: no 413 response in the document", verb, path)
				continue
			}
			if name, ok := strings.CutPrefix(r.Ref, "#/components/responses/"); ok {
				r = doc.Components.Responses[name]
			}
			if !strings.Contains(r.Description, "BODY_TOO_LARGE") || !strings.Contains(r.Description, "ORDERFLOW_GATEWAY_MAX_BODY_BYTES") {
				t.Errorf("%s %s: 413 description %q names neither the reason nor the setting", verb, path, r.Description)
			}
			if got := r.Content["application/json"].Schema.Ref; got != "#/components/schemas/rpcStatus" {
				t.Errorf("%s %s: 413 schema = %q, want the google.rpc.Status", verb, path, got)
			}
		}
	}
	if posts == 0 {
		t.Fatal("the document has no operation with a body")
	}
}
