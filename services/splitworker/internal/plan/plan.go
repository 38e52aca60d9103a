// Package plan decides, without side effects, how an order is split: which
// items fail which business check (with their public error codes) and how
// the valid items are packed into shipments, per warehouse and within a
// parcel weight limit. The same inputs always give the same plan, so a plan
// stored before any shipment is requested can be replayed after a crash.
package plan

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/errmsg"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
)

// Options bound what a plan accepts.
type Options struct {
	// ParcelMaxGrams is the heaviest parcel a warehouse ships.
	ParcelMaxGrams int
	// MaxQuantity is the most units one item may order.
	MaxQuantity int
}

// Shipment is one parcel to request from the fulfilment system.
type Shipment struct {
	// Key is the idempotency key "<taskId>/<n>", n counting from 1.
	Key         string                    `json:"key"`
	Warehouse   string                    `json:"warehouse"`
	Lines       []fulfilment.ShipmentLine `json:"lines"`
	WeightGrams int                       `json:"weightGrams"`
}

// Failure is an item that failed a check.
type Failure struct {
	ItemCode string `json:"itemCode"`
	Code     int32  `json:"code"`
	Msg      string `json:"msg"`
}

// Plan is how an order is split.
type Plan struct {
	// Total is the number of items in the order.
	Total     int        `json:"total"`
	Shipments []Shipment `json:"shipments"`
	Failures  []Failure  `json:"failures"`
}

// Message returns the public message of an item-level code (see
// pkg/platform/errmsg, the one table of messages).
func Message(code errcodev1.ErrorCode) string { return errmsg.Message(code) }

// Fail returns the failure of item with code and an optional detail for
// the member.
func Fail(item string, code errcodev1.ErrorCode, detail string) Failure {
	msg := Message(code)
	if detail != "" {
		msg += ": " + detail
	}
	return Failure{ItemCode: item, Code: int32(code), Msg: msg}
}

// valid is an item that passed every check.
type valid struct {
	line   fulfilment.ShipmentLine
	weight int
}

// SKUs is a catalogue's SKUs by code. Index builds it once per read of
// the catalogue, not per plan: a shop's catalogue has thousands of SKUs,
// an order a few.
type SKUs map[string]fulfilment.SKU

// Index indexes cat's SKUs by code.
func Index(cat fulfilment.Catalogue) SKUs {
	skus := make(SKUs, len(cat.SKUs))
	for _, k := range cat.SKUs {
		skus[k.SKU] = k
	}
	return skus
}

// NeedsSettlement reports whether items order a SKU that requires a
// settled bill, so the member's standing must be read before planning.
func (s SKUs) NeedsSettlement(items []*taskv1.OrderItem) bool {
	for _, it := range items {
		if s[it.GetSku()].SettlementRequired {
			return true
		}
	}
	return false
}

// Build plans task taskID's order: each item is checked against the
// catalogue's SKUs and the member (unknown SKU 10002, quantity 10003, settlement
// required with an unpaid bill 10001, too heavy for a parcel 10008, not
// enough stock left after the order's earlier items 10004), and the valid
// items are packed per warehouse by first-fit decreasing weight (ties by
// item code) into parcels of at most opts.ParcelMaxGrams. Warehouses are
// taken in name order, so shipment numbers are deterministic.
func Build(taskID string, items []*taskv1.OrderItem, skus SKUs, member fulfilment.Member, opts Options) Plan {
	p := Plan{Total: len(items), Shipments: []Shipment{}, Failures: []Failure{}}
	left := make(map[string]int) // stock left after earlier items
	byWarehouse := make(map[string][]valid)
	for _, it := range items {
		k, ok := skus[it.GetSku()]
		qty := int(it.GetQuantity())
		switch {
		case !ok:
			p.Failures = append(p.Failures, Fail(it.GetItemCode(), errcodev1.ErrorCode_ERROR_CODE_UNKNOWN_SKU, it.GetSku()))
			continue
		case qty <= 0 || qty > opts.MaxQuantity:
			p.Failures = append(p.Failures, Fail(it.GetItemCode(), errcodev1.ErrorCode_ERROR_CODE_INVALID_QUANTITY,
				fmt.Sprintf("%d is not within 1..%d", qty, opts.MaxQuantity)))
			continue
		case k.SettlementRequired && member.BillUnpaid:
			p.Failures = append(p.Failures, Fail(it.GetItemCode(), errcodev1.ErrorCode_ERROR_CODE_BILL_UNPAID, ""))
			continue
		case k.WeightGrams*qty > opts.ParcelMaxGrams:
			p.Failures = append(p.Failures, Fail(it.GetItemCode(), errcodev1.ErrorCode_ERROR_CODE_PARCEL_OVERWEIGHT,
				fmt.Sprintf("%d g over the %d g limit", k.WeightGrams*qty, opts.ParcelMaxGrams)))
			continue
		}
		stock, seen := left[k.SKU]
		if !seen {
			stock = k.Stock
		}
		if stock < qty {
			p.Failures = append(p.Failures, Fail(it.GetItemCode(), errcodev1.ErrorCode_ERROR_CODE_OUT_OF_STOCK,
				fmt.Sprintf("%d of %s available", max(stock, 0), k.SKU)))
			continue
		}
		left[k.SKU] = stock - qty
		byWarehouse[k.Warehouse] = append(byWarehouse[k.Warehouse], valid{
			line:   fulfilment.ShipmentLine{ItemCode: it.GetItemCode(), SKU: k.SKU, Quantity: qty},
			weight: k.WeightGrams * qty,
		})
	}
	warehouses := make([]string, 0, len(byWarehouse))
	for w := range byWarehouse {
		warehouses = append(warehouses, w)
	}
	slices.Sort(warehouses)
	for _, w := range warehouses {
		for _, s := range pack(w, byWarehouse[w], opts.ParcelMaxGrams) {
			s.Key = taskID + "/" + strconv.Itoa(len(p.Shipments)+1)
			p.Shipments = append(p.Shipments, s)
		}
	}
	return p
}

// pack places items into parcels by first-fit decreasing weight.
func pack(warehouse string, items []valid, limit int) []Shipment {
	slices.SortStableFunc(items, func(a, b valid) int {
		if c := cmp.Compare(b.weight, a.weight); c != 0 {
			return c
		}
		return cmp.Compare(a.line.ItemCode, b.line.ItemCode)
	})
	var parcels []Shipment
	for _, it := range items {
		placed := false
		for i := range parcels {
			if parcels[i].WeightGrams+it.weight <= limit {
				parcels[i].Lines = append(parcels[i].Lines, it.line)
				parcels[i].WeightGrams += it.weight
				placed = true
				break
			}
		}
		if !placed {
			parcels = append(parcels, Shipment{Warehouse: warehouse, Lines: []fulfilment.ShipmentLine{it.line}, WeightGrams: it.weight})
		}
	}
	return parcels
}
