package tasks

import (
	"fmt"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/rules"
)

// validateSplit checks a submission against the order-split rules and
// returns an INVALID_ARGUMENT error naming the first offending field (JSON
// paths, as REST clients send them).
func validateSplit(req *gatewayv1.CreateOrderSplitRequest, r *rules.OrderSplit) error {
	if err := r.OrderCode.CheckText(req.GetOrderCode()); err != nil {
		return err
	}
	if err := r.RequestID.CheckText(req.GetRequestId()); err != nil {
		return err
	}
	switch req.GetPriority() {
	case taskv1.Priority_PRIORITY_UNSPECIFIED, taskv1.Priority_PRIORITY_NORMAL, taskv1.Priority_PRIORITY_HIGH:
	default:
		return apierr.Field("priority", "must be PRIORITY_NORMAL or PRIORITY_HIGH")
	}
	items := req.GetItems()
	if err := r.Items.CheckCount(len(items)); err != nil {
		return err
	}
	seen := make(map[string]int, len(items))
	for i, it := range items {
		if err := r.ItemCode.CheckTextAt(i, it.GetItemCode()); err != nil {
			return err
		}
		if j, dup := seen[it.GetItemCode()]; dup {
			return r.ItemCode.FieldError(i, fmt.Sprintf("duplicates %s %q", r.ItemCode.Path(j), it.GetItemCode()))
		}
		seen[it.GetItemCode()] = i
		if err := r.SKU.CheckTextAt(i, it.GetSku()); err != nil {
			return err
		}
		if err := r.Quantity.CheckIntAt(i, int64(it.GetQuantity())); err != nil {
			return err
		}
	}
	return nil
}
