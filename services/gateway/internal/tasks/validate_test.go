package tasks

import (
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/rules"
)

var testRules = rules.NewOrderSplit(5, 100)

// decodeStrict decodes a REST body the way the gateway does.
func decodeStrict(body []byte) (*gatewayv1.CreateOrderSplitRequest, error) {
	m := &runtime.JSONPb{UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false}}
	var req gatewayv1.CreateOrderSplitRequest
	return &req, m.Unmarshal(body, &req)
}

func TestValidateSplitAcceptsAGoodOrder(t *testing.T) {
	req, err := decodeStrict([]byte(`{"orderCode":"ORD-1","requestId":"r-1","items":[{"itemCode":"a","sku":"SKU-1","quantity":100},{"itemCode":"b","sku":"SKU-2","quantity":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := validateSplit(req, testRules); err != nil {
		t.Errorf("validateSplit(good order) = %v, want nil", err)
	}
}

// FuzzSplitBody decodes arbitrary REST bodies and validates them: never a
// panic, every rejection is INVALID_FIELD naming a field, and whatever is
// accepted respects every limit.
func FuzzSplitBody(f *testing.F) {
	for _, seed := range []string{
		`{"orderCode":"ORD-1","items":[{"itemCode":"a","sku":"S","quantity":1}]}`,
		`{"orderCode":"","items":[]}`,
		`{"orderCode":"A","items":[{"itemCode":"a","sku":"S","quantity":-1},{"itemCode":"a","sku":"S","quantity":1}]}`,
		`{"orderCode":"A","itemz":1}`,
		`{"orderCode":"A",`,
		`{"orderCode":"A b","requestId":"x y","items":[{"itemCode":"a","sku":"S","quantity":"2"}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeStrict(body)
		if err != nil {
			return // the gateway answers 400 for undecodable bodies
		}
		err = validateSplit(req, testRules)
		if err != nil {
			if apierr.Reason(err) != apierr.ReasonInvalidField {
				t.Fatalf("validateSplit() = %v, want an INVALID_FIELD error", err)
			}
			return
		}
		if n := len(req.GetItems()); n < 1 || n > 5 {
			t.Fatalf("accepted %d items, limits 1..5", n)
		}
		if c := req.GetOrderCode(); c == "" || len(c) > 64 || !rules.Code.Has(c) {
			t.Fatalf("accepted order code %q", req.GetOrderCode())
		}
		seen := map[string]bool{}
		for _, it := range req.GetItems() {
			if it.GetQuantity() < 1 || it.GetQuantity() > 100 {
				t.Fatalf("accepted quantity %d", it.GetQuantity())
			}
			if seen[it.GetItemCode()] || strings.TrimSpace(it.GetSku()) == "" {
				t.Fatalf("accepted duplicate item code or empty sku in %v", req)
			}
			seen[it.GetItemCode()] = true
		}
	})
}

func TestValidateSplitPriority(t *testing.T) {
	for body, wantErr := range map[string]bool{
		`{"orderCode":"O","priority":"PRIORITY_HIGH","items":[{"itemCode":"a","sku":"S","quantity":1}]}`:   false,
		`{"orderCode":"O","priority":"PRIORITY_NORMAL","items":[{"itemCode":"a","sku":"S","quantity":1}]}`: false,
		`{"orderCode":"O","items":[{"itemCode":"a","sku":"S","quantity":1}]}`:                              false,
		`{"orderCode":"O","priority":7,"items":[{"itemCode":"a","sku":"S","quantity":1}]}`:                 true,
	} {
		req, err := decodeStrict([]byte(body))
		if err != nil {
			t.Fatalf("decode %s: %v", body, err)
		}
		err = validateSplit(req, testRules)
		if (err != nil) != wantErr {
			t.Errorf("validateSplit(%s) = %v, want error %v", body, err, wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "priority") {
			t.Errorf("validateSplit(%s) = %v, want the field priority named", body, err)
		}
	}
	if _, err := decodeStrict([]byte(`{"orderCode":"O","priority":"URGENT","items":[]}`)); err == nil {
		t.Error("an unknown priority name decoded; the gateway must answer 400")
	}
}

// TestValidateSplitAllocations: checking a valid order allocates nothing
// (the map that finds duplicate item codes stays on the stack).
func TestValidateSplitAllocations(t *testing.T) {
	req, err := decodeStrict([]byte(`{"orderCode":"ORD-1","requestId":"r-1","items":[{"itemCode":"a","sku":"SKU-1","quantity":100},{"itemCode":"b","sku":"SKU-2","quantity":1},{"itemCode":"c","sku":"SKU-3","quantity":7}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = validateSplit(req, testRules) }); n != 0 {
		t.Errorf("validateSplit(valid order) allocates %v times, want 0", n)
	}
}
