// Package errmsg holds the public message of every business error code:
// one text per code, named by the error-code enum of the shared contracts,
// used wherever a task, an item failure or a result carries a code. The
// messages name no internals.
package errmsg

import errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"

var messages = map[errcodev1.ErrorCode]string{
	errcodev1.ErrorCode_ERROR_CODE_GENERIC:                "processing error, please retry later",
	errcodev1.ErrorCode_ERROR_CODE_BILL_UNPAID:            "bill unpaid: please settle it in the settlement centre",
	errcodev1.ErrorCode_ERROR_CODE_UNKNOWN_SKU:            "unknown SKU",
	errcodev1.ErrorCode_ERROR_CODE_INVALID_QUANTITY:       "invalid quantity",
	errcodev1.ErrorCode_ERROR_CODE_OUT_OF_STOCK:           "out of stock",
	errcodev1.ErrorCode_ERROR_CODE_FULFILMENT_REJECTED:    "the warehouse could not ship the item",
	errcodev1.ErrorCode_ERROR_CODE_FULFILMENT_UNAVAILABLE: "the warehouse system is unavailable, please retry later",
	errcodev1.ErrorCode_ERROR_CODE_TASK_CANCELLED:         "the task was cancelled",
	errcodev1.ErrorCode_ERROR_CODE_PARCEL_OVERWEIGHT:      "item is heavier than the largest parcel",
	errcodev1.ErrorCode_ERROR_CODE_DELIVERY_LIMIT:         "processing failed repeatedly, please retry later",
	errcodev1.ErrorCode_ERROR_CODE_DUPLICATE_ORDER:        "the order was already submitted",
	errcodev1.ErrorCode_ERROR_CODE_ORDER_CLAIM_LOST:       "the order is being handled by a newer submission",
}

// Message returns the public message of code; a code without one (which
// the table test rules out for every code of the catalogue) reads as the
// generic message.
func Message(code errcodev1.ErrorCode) string {
	if m, ok := messages[code]; ok {
		return m
	}
	return messages[errcodev1.ErrorCode_ERROR_CODE_GENERIC]
}
