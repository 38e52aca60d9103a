package tasks

import (
	"fmt"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
)

// Limits bound what a submission may contain.
type Limits struct {
	// MaxItems is the most items one order may have.
	MaxItems int
	// MaxQuantity is the largest quantity of one item.
	MaxQuantity int32
}

// validCode reports whether s is 1 to max characters of [A-Za-z0-9_-].
func validCode(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validateSplit checks a submission and returns an INVALID_ARGUMENT error
// naming the first offending field (JSON names, as REST clients send them).
func validateSplit(req *gatewayv1.CreateOrderSplitRequest, lim Limits) error {
	if req.GetOrderCode() == "" {
		return apierr.Field("orderCode", "must not be empty")
	}
	if !validCode(req.GetOrderCode(), 64) {
		return apierr.Field("orderCode", "must be 1 to 64 characters of letters, digits, '_' or '-'")
	}
	if req.GetRequestId() != "" && !validCode(req.GetRequestId(), 64) {
		return apierr.Field("requestId", "must be 1 to 64 characters of letters, digits, '_' or '-'")
	}
	switch req.GetPriority() {
	case taskv1.Priority_PRIORITY_UNSPECIFIED, taskv1.Priority_PRIORITY_NORMAL, taskv1.Priority_PRIORITY_HIGH:
	default:
		return apierr.Field("priority", "must be PRIORITY_NORMAL or PRIORITY_HIGH")
	}
	items := req.GetItems()
	if len(items) == 0 {
		return apierr.Field("items", "must contain at least one item")
	}
	if len(items) > lim.MaxItems {
		return apierr.Field("items", fmt.Sprintf("must contain at most %d items", lim.MaxItems))
	}
	seen := make(map[string]int, len(items))
	for i, it := range items {
		f := func(name string) string { return fmt.Sprintf("items[%d].%s", i, name) }
		if it.GetItemCode() == "" {
			return apierr.Field(f("itemCode"), "must not be empty")
		}
		if !validCode(it.GetItemCode(), 64) {
			return apierr.Field(f("itemCode"), "must be 1 to 64 characters of letters, digits, '_' or '-'")
		}
		if j, dup := seen[it.GetItemCode()]; dup {
			return apierr.Field(f("itemCode"), fmt.Sprintf("duplicates items[%d].itemCode %q", j, it.GetItemCode()))
		}
		seen[it.GetItemCode()] = i
		if it.GetSku() == "" {
			return apierr.Field(f("sku"), "must not be empty")
		}
		if !validCode(it.GetSku(), 64) {
			return apierr.Field(f("sku"), "must be 1 to 64 characters of letters, digits, '_' or '-'")
		}
		if it.GetQuantity() <= 0 {
			return apierr.Field(f("quantity"), "must be greater than 0")
		}
		if it.GetQuantity() > lim.MaxQuantity {
			return apierr.Field(f("quantity"), fmt.Sprintf("must be at most %d", lim.MaxQuantity))
		}
	}
	return nil
}
