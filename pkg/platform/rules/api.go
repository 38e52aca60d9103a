package rules

import (
	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
)

// Code is the character set of order codes, item codes, SKUs and request
// ids.
var Code = NewCharset("A-Za-z0-9_-", "letters, digits, '_' or '-'")

// OrderSplit is the rules of an order split (CreateOrderSplit). Beyond
// them, item codes are unique within the order and the priority is one of
// the enum's values.
type OrderSplit struct {
	OrderCode, RequestID, Items, ItemCode, SKU, Quantity Rule
}

// NewOrderSplit returns the order-split rules with a deployment's caps
// (ORDERFLOW_GATEWAY_MAX_ITEMS, ORDERFLOW_GATEWAY_MAX_QUANTITY).
func NewOrderSplit(maxItems, maxQuantity int64) *OrderSplit {
	return &OrderSplit{
		OrderCode: NewText("orderCode", 1, 64, Code),
		RequestID: NewText("requestId", 0, 64, Code),
		Items:     NewList("items", 1, maxItems, "items"),
		ItemCode:  NewText("items[].itemCode", 1, 64, Code),
		SKU:       NewText("items[].sku", 1, 64, Code),
		Quantity:  NewInt("items[].quantity", 1, maxQuantity, ""),
	}
}

// Table lists the rules.
func (o *OrderSplit) Table() Table {
	return Table{
		Method: gatewayv1.OrderSplitService_CreateOrderSplit_FullMethodName,
		Rules:  []*Rule{&o.OrderCode, &o.RequestID, &o.Items, &o.ItemCode, &o.SKU, &o.Quantity},
	}
}

// Tasks is the rules of listing tasks.
var Tasks = struct{ PageSize Rule }{
	PageSize: NewInt("pageSize", 0, 100, ""),
}

// Payment is the rules of a payment: the shop's order code, the amount and
// the description shown to the shopper, as the gateway accepts them and
// the reconciler places them.
var Payment = struct{ OrderCode, AmountFen, Description Rule }{
	OrderCode:   NewText("orderCode", 1, 32, Code),
	AmountFen:   NewInt("amountFen", 1, 100_000_000, "fen"),
	Description: NewText("description", 0, 127, nil),
}

// Gateway lists the rules of every gateway method whose request has
// them, with a deployment's order-split rules.
func Gateway(split *OrderSplit) []Table {
	p := &Payment
	return []Table{
		split.Table(),
		{Method: gatewayv1.TaskService_ListTasks_FullMethodName, Rules: []*Rule{&Tasks.PageSize}},
		{Method: gatewayv1.PaymentService_CreatePayment_FullMethodName, Rules: []*Rule{&p.OrderCode, &p.AmountFen, &p.Description}},
		{Method: gatewayv1.PaymentService_GetPayment_FullMethodName, Rules: []*Rule{&p.OrderCode}},
	}
}

// Reconciler lists the rules of the reconciler's methods.
func Reconciler() []Table {
	p := &Payment
	return []Table{
		{Method: reconcilerv1.ReconcilerService_CreatePayment_FullMethodName, Rules: []*Rule{&p.OrderCode, &p.AmountFen, &p.Description}},
		{Method: reconcilerv1.ReconcilerService_GetPayment_FullMethodName, Rules: []*Rule{&p.OrderCode}},
		{Method: reconcilerv1.ReconcilerService_CancelTracking_FullMethodName, Rules: []*Rule{&p.OrderCode}},
		{Method: reconcilerv1.ReconcilerService_ApplyNotification_FullMethodName, Rules: []*Rule{&p.OrderCode}},
	}
}
