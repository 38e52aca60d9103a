package openapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	"github.com/orderflow/orderflow/pkg/platform/rules"
	"github.com/orderflow/orderflow/services/gateway/internal/openapi"
)

// TestDocumentIsOpenAPI31WithEveryAnswer checks the served document's
// contract: OpenAPI 3.1, every operation of the generated document there
// with its 200 answer and the error answers every operation can give, the
// ops API needing the role admin, the error body naming its ErrorInfo and
// the business error codes, and the provider's callback with its
// signature scheme.
func TestDocumentIsOpenAPI31WithEveryAnswer(t *testing.T) {
	raw, err := openapi.Document(nil)
	if err != nil {
		t.Fatal(err)
	}
	type operation struct {
		OperationID string                    `json:"operationId"`
		Tags        []string                  `json:"tags"`
		Security    []map[string][]string     `json:"security"`
		Responses   map[string]map[string]any `json:"responses"`
		RequestBody map[string]any            `json:"requestBody"`
	}
	var doc struct {
		OpenAPI    string                          `json:"openapi"`
		Paths      map[string]map[string]operation `json:"paths"`
		Security   []map[string][]string           `json:"security"`
		Components struct {
			Schemas         map[string]map[string]any `json:"schemas"`
			Responses       map[string]map[string]any `json:"responses"`
			SecuritySchemes map[string]map[string]any `json:"securitySchemes"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var v2 struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openapi.Generated, &v2); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}
	ops := 0
	for path, methods := range v2.Paths {
		for method, want := range methods {
			ops++
			op, ok := doc.Paths[path][method]
			if !ok || op.OperationID != want.OperationID {
				t.Errorf("%s %s: missing from the 3.1 document", method, path)
				continue
			}
			for _, code := range []string{"200", "400", "401", "413", "429", "500", "503"} {
				if _, ok := op.Responses[code]; !ok {
					t.Errorf("%s: no %s answer", op.OperationID, code)
				}
			}
			if _, ok := op.Responses["default"]; ok {
				t.Errorf("%s: a default answer instead of the statuses", op.OperationID)
			}
			admin := strings.HasPrefix(op.OperationID, "OpsService_")
			_, forbidden := op.Responses["403"]
			adminSec := len(op.Security) == 1 && len(op.Security[0]["bearer"]) == 1 && op.Security[0]["bearer"][0] == "admin"
			if admin != adminSec || admin && !forbidden {
				t.Errorf("%s: 403 documented %v, security %v; want the role admin and 403 exactly for the ops API", op.OperationID, forbidden, op.Security)
			}
		}
	}
	if ops < 28 {
		t.Errorf("%d operations in the generated document, want at least 28", ops)
	}
	for id, code := range map[string]string{"TaskService_GetTask": "404", "PaymentService_CreatePayment": "409", "PaymentService_GetPayment": "404", "OrderSplitService_CreateOrderSplit": "403"} {
		found := false
		for _, methods := range doc.Paths {
			for _, op := range methods {
				if op.OperationID == id {
					_, found = op.Responses[code]
				}
			}
		}
		if !found {
			t.Errorf("%s: no %s answer", id, code)
		}
	}
	if len(doc.Security) != 1 || doc.Components.SecuritySchemes["bearer"]["scheme"] != "bearer" ||
		doc.Components.SecuritySchemes["providerSignature"]["name"] != "Wechatpay-Signature" {
		t.Errorf("security %v, schemes %v; want bearer by default and the provider's signature", doc.Security, doc.Components.SecuritySchemes)
	}
	notify := doc.Paths["/v1/payments/notify"]["post"]
	if len(notify.Security) != 1 || notify.Security[0]["providerSignature"] == nil || notify.Responses["204"] == nil || notify.Responses["401"] == nil {
		t.Errorf("POST /v1/payments/notify = %+v, want the provider's signature and its 204 and 401 answers", notify)
	}
	codes := fmt.Sprint(doc.Components.Schemas["ErrorCode"]["enum"])
	for _, c := range []string{"-1", "10001", "10010"} {
		if !strings.Contains(codes, c) {
			t.Errorf("ErrorCode enum %s lacks %s", codes, c)
		}
	}
	if ref := fmt.Sprint(doc.Components.Schemas["v1Task"]["properties"].(map[string]any)["errorCode"]); !strings.Contains(ref, "#/components/schemas/ErrorCode") {
		t.Errorf("v1Task.errorCode = %s, want the ErrorCode catalogue", ref)
	}
	if fmt.Sprint(doc.Components.Responses["BadRequest"]["content"]) == "" || !strings.Contains(fmt.Sprint(doc.Components.Responses["BadRequest"]), "#/components/schemas/rpcStatus") {
		t.Errorf("BadRequest = %v, want the rpcStatus body", doc.Components.Responses["BadRequest"])
	}
}

// TestDocumentRefusesRulesItCannotPlace: a rule for an operation or a
// field the document lacks, or two bounds for one field, fail the start
// rather than leave the document silently incomplete.
func TestDocumentRefusesRulesItCannotPlace(t *testing.T) {
	code := rules.NewText("orderCode", 1, 8, rules.Code)
	other := rules.NewText("orderCode", 1, 9, rules.Code)
	missing := rules.NewText("noSuchField", 1, 8, nil)
	nested := rules.NewInt("orderCode[].quantity", 1, 2, "")
	split := gatewayv1.OrderSplitService_CreateOrderSplit_FullMethodName
	tests := []struct {
		name   string
		tables []rules.Table
		want   string
	}{
		{"unknown operation", []rules.Table{{Method: "/orderflow.gateway.v1.NoService/Nothing", Rules: []*rules.Rule{&code}}}, "no operation NoService_Nothing"},
		{"unknown field", []rules.Table{{Method: split, Rules: []*rules.Rule{&missing}}}, "no property noSuchField"},
		{"not a list", []rules.Table{{Method: split, Rules: []*rules.Rule{&nested}}}, "orderCode is not an array"},
		{"two bounds", []rules.Table{{Method: split, Rules: []*rules.Rule{&code, &other}}}, "maxLength is both 8 and 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := openapi.Document(tt.tables)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Document() = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}
