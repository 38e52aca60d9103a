package plan_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/services/splitworker/internal/plan"
)

func item(code, sku string, qty int32) *taskv1.OrderItem {
	return &taskv1.OrderItem{ItemCode: code, Sku: sku, Quantity: qty}
}

func line(code, sku string, qty int) fulfilment.ShipmentLine {
	return fulfilment.ShipmentLine{ItemCode: code, SKU: sku, Quantity: qty}
}

var opts = plan.Options{ParcelMaxGrams: 20000, MaxQuantity: 100}

func TestBuild(t *testing.T) {
	cat := plan.Index(fulfilmentsim.DefaultCatalogue())
	paid := fulfilment.Member{MemberID: "demo"}
	unpaid := fulfilment.Member{MemberID: "member-unpaid", BillUnpaid: true}
	tests := []struct {
		name   string
		items  []*taskv1.OrderItem
		member fulfilment.Member
		want   plan.Plan
	}{
		{
			name: "demo order: two warehouses, unknown sku, out of stock",
			items: []*taskv1.OrderItem{
				item("A1", "SKU-TEA-500G", 2), item("A2", "SKU-RICE-10KG", 1), item("A3", "SKU-KETTLE", 1),
				item("A4", "SKU-NOPE", 1), item("A5", "SKU-LAST-ONE", 3), item("A6", "SKU-OIL-5L", 2),
			},
			member: paid,
			want: plan.Plan{
				Total: 6,
				Shipments: []plan.Shipment{
					{Key: "t/1", Warehouse: "WH-BEIJING", WeightGrams: 19200,
						Lines: []fulfilment.ShipmentLine{line("A2", "SKU-RICE-10KG", 1), line("A6", "SKU-OIL-5L", 2)}},
					{Key: "t/2", Warehouse: "WH-SHANGHAI", WeightGrams: 2500,
						Lines: []fulfilment.ShipmentLine{line("A3", "SKU-KETTLE", 1), line("A1", "SKU-TEA-500G", 2)}},
				},
				Failures: []plan.Failure{
					plan.Fail("A4", 10002, "SKU-NOPE"),
					plan.Fail("A5", 10004, "1 of SKU-LAST-ONE available"),
				},
			},
		},
		{
			name:   "settlement required with unpaid bill",
			items:  []*taskv1.OrderItem{item("G", "SKU-GIFT-CARD", 1), item("M", "SKU-MUG", 1)},
			member: unpaid,
			want: plan.Plan{
				Total:     2,
				Shipments: []plan.Shipment{{Key: "t/1", Warehouse: "WH-SHANGHAI", WeightGrams: 400, Lines: []fulfilment.ShipmentLine{line("M", "SKU-MUG", 1)}}},
				Failures:  []plan.Failure{plan.Fail("G", 10001, "")},
			},
		},
		{
			name:   "settlement required with paid bill",
			items:  []*taskv1.OrderItem{item("G", "SKU-GIFT-CARD", 1)},
			member: paid,
			want: plan.Plan{
				Total:     1,
				Shipments: []plan.Shipment{{Key: "t/1", Warehouse: "WH-SHANGHAI", WeightGrams: 20, Lines: []fulfilment.ShipmentLine{line("G", "SKU-GIFT-CARD", 1)}}},
				Failures:  []plan.Failure{},
			},
		},
		{
			name:   "invalid quantities",
			items:  []*taskv1.OrderItem{item("Z", "SKU-MUG", 0), item("N", "SKU-MUG", -2), item("B", "SKU-MUG", 101)},
			member: paid,
			want: plan.Plan{
				Total:     3,
				Shipments: []plan.Shipment{},
				Failures: []plan.Failure{
					plan.Fail("Z", 10003, "0 is not within 1..100"),
					plan.Fail("N", 10003, "-2 is not within 1..100"),
					plan.Fail("B", 10003, "101 is not within 1..100"),
				},
			},
		},
		{
			name:   "overweight item and parcels split by weight",
			items:  []*taskv1.OrderItem{item("S", "SKU-SOFA", 1), item("D1", "SKU-DESK", 1), item("D2", "SKU-DESK", 1)},
			member: paid,
			want: plan.Plan{
				Total: 3,
				Shipments: []plan.Shipment{
					{Key: "t/1", Warehouse: "WH-GUANGZHOU", WeightGrams: 18000, Lines: []fulfilment.ShipmentLine{line("D1", "SKU-DESK", 1)}},
					{Key: "t/2", Warehouse: "WH-GUANGZHOU", WeightGrams: 18000, Lines: []fulfilment.ShipmentLine{line("D2", "SKU-DESK", 1)}},
				},
				Failures: []plan.Failure{plan.Fail("S", 10008, "45000 g over the 20000 g limit")},
			},
		},
		{
			name:   "stock shared by the order's items",
			items:  []*taskv1.OrderItem{item("P1", "SKU-PHONE", 2), item("P2", "SKU-PHONE", 2), item("P3", "SKU-PHONE", 1)},
			member: paid,
			want: plan.Plan{
				Total: 3,
				Shipments: []plan.Shipment{{Key: "t/1", Warehouse: "WH-BEIJING", WeightGrams: 600,
					Lines: []fulfilment.ShipmentLine{line("P1", "SKU-PHONE", 2), line("P3", "SKU-PHONE", 1)}}},
				Failures: []plan.Failure{plan.Fail("P2", 10004, "1 of SKU-PHONE available")},
			},
		},
		{
			name:   "first fit decreasing fills earlier parcels",
			items:  []*taskv1.OrderItem{item("a", "SKU-RICE-10KG", 1), item("b", "SKU-OIL-5L", 3), item("c", "SKU-OIL-5L", 1), item("d", "SKU-PHONE", 1)},
			member: paid,
			want: plan.Plan{
				Total: 4,
				Shipments: []plan.Shipment{
					{Key: "t/1", Warehouse: "WH-BEIJING", WeightGrams: 18600,
						Lines: []fulfilment.ShipmentLine{line("b", "SKU-OIL-5L", 3), line("c", "SKU-OIL-5L", 1), line("d", "SKU-PHONE", 1)}},
					{Key: "t/2", Warehouse: "WH-BEIJING", WeightGrams: 10000,
						Lines: []fulfilment.ShipmentLine{line("a", "SKU-RICE-10KG", 1)}},
				},
				Failures: []plan.Failure{},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan.Build("t", tt.items, cat, tt.member, opts)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Build() mismatch (-want +got):\n%s", diff)
			}
			again := plan.Build("t", tt.items, cat, tt.member, opts)
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("Build() is not deterministic (-first +second):\n%s", diff)
			}
		})
	}
}

// BenchmarkBuild plans a 20-item order against a catalogue of 10,000
// SKUs, as a shop's would be.
func BenchmarkBuild(b *testing.B) {
	var cat fulfilment.Catalogue
	for i := range 10000 {
		cat.SKUs = append(cat.SKUs, fulfilment.SKU{SKU: fmt.Sprintf("SKU-%05d", i), Warehouse: fmt.Sprintf("WH-%d", i%3),
			Stock: 1000, WeightGrams: 100 + i%900})
	}
	var items []*taskv1.OrderItem
	for i := range 20 {
		items = append(items, item(fmt.Sprintf("I%02d", i), fmt.Sprintf("SKU-%05d", i*97), 1))
	}
	member := fulfilment.Member{MemberID: "m"}
	skus := plan.Index(cat) // once per catalogue read
	for b.Loop() {
		if skus.NeedsSettlement(items) {
			b.Fatal("no SKU here needs a settled bill")
		}
		plan.Build("t", items, skus, member, opts)
	}
}

func TestNeedsSettlement(t *testing.T) {
	skus := plan.Index(fulfilmentsim.DefaultCatalogue())
	for _, tt := range []struct {
		items []*taskv1.OrderItem
		want  bool
	}{
		{[]*taskv1.OrderItem{item("a", "SKU-MUG", 1), item("b", "SKU-NOPE", 1)}, false},
		{[]*taskv1.OrderItem{item("a", "SKU-MUG", 1), item("b", "SKU-PHONE", 1)}, true},
		{nil, false},
	} {
		if got := skus.NeedsSettlement(tt.items); got != tt.want {
			t.Errorf("NeedsSettlement(%v) = %v, want %v", tt.items, got, tt.want)
		}
	}
}
