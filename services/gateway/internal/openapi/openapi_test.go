package openapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	"github.com/orderflow/orderflow/pkg/platform/rules"
	"github.com/orderflow/orderflow/services/gateway/internal/openapi"
)

func TestDocumentWithoutRulesIsTheGeneratedOne(t *testing.T) {
	got, err := openapi.Document(nil)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(openapi.Generated, &b); err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Error("Document(nil) differs from the generated document")
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
